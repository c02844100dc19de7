from __future__ import annotations

from pathlib import Path

import pytest

from fulmen.errors import ConfigError
from fulmen.trainer.config import load_config

BASE = """
model: tiny
agent: agent:toy_agent
data:
  train: agent:train_tasks
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_minimal_config_gets_defaults_and_resolves_paths(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, BASE + "run_dir: out\npython_path: [src]\n"))
    assert config.run_dir == tmp_path / "out"
    assert config.python_path == [tmp_path / "src"]
    assert config.engine.kind == "builtin"
    assert config.algorithm.grpo.finetune == "lora"


def test_overrides_use_dotted_keys(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, BASE),
        overrides=["algorithm.steps=3", "rollouts.train_sampling={temperature: 0.5}"],
    )
    assert config.algorithm.steps == 3
    assert config.rollouts.train_sampling == {"temperature": 0.5, "top_p": 1.0}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("validation: {every: 2}\n", "data.val is not set"),
        ("engine: {kind: builtin, url: 'http://x/v1'}\n", "engine.url has no effect"),
        ("engine: {kind: vllm, max_batch: 4}\n", "max_batch has no effect"),
        ("engine: {kind: endpoint, url: 'http://x/v1', prefix_cache: false}\n", "prefix_cache"),
        ("engine: {dtype: float16}\n", "engine.dtype"),
        ("engine: {kind: vllm, threads: 2}\n", "threads has no effect"),
        ("engine: {threads: 0}\n", "engine.threads"),
        ("engine: {threads: 2}\ncluster: {backend: ray}\n", "cluster.engine_cpus threads"),
        ("engine: {kind: endpoint, url: 'http://x/v1'}\n", "cannot take new weights"),
        ("algorithm: {grpo: {finetune: full, lora: {r: 4}}}\n", "lora has no effect"),
        ("algorithm: {name: sft, sft: {finetune: full, lora: {r: 4}}}\n", "lora has no effect"),
        (
            "algorithm: {name: sft, sft: {finetune: full, dtype: bfloat16}}\n",
            "sft.dtype 'bfloat16' with finetune 'full'",
        ),
        (
            "engine: {kind: vllm}\nstages: [grpo, {name: sft, sft: {finetune: full}}]\n"
            "cluster: {backend: ray}\n",
            r"finetune 'full' \(sft\) with engine.kind 'vllm' .* cluster's vLLM replicas",
        ),
        ("algorithm: {grpo: {kl_estimator: k1}}\n", "kl_estimator has no effect"),
        ("algorithm: {transitions: {gamma: 0.9}}\n", "gamma has effect only"),
        ("algorithm: {grpo: {learning_rate: -1}}\n", "learning_rate"),
        ("algorithm: {group_size: 1}\n", "group_size"),
        ("unknown_option: 1\n", "unknown_option"),
        ("algorithm: {transitions: {credit: per_call}}\n", "per_call' has no effect"),
        (
            "rollouts: {train_sampling: {temperature: 0.8}}\n"
            "algorithm: {grpo: {temperature: 1.0}}\n",
            "train_sampling.temperature=0.8 and algorithm.grpo.temperature=1.0 differ",
        ),
        ("rollouts: {train_sampling: {temperature: 0}}\n", "must be a number > 0"),
        ("algorithm: {grpo: {temperature: 0}}\n", "must be a number > 0"),
        ("rollouts: {train_sampling: {top_p: 0.9}}\n", "train_sampling.top_p=0.9 changes"),
        ("rollouts: {train_sampling: {top_k: 20}}\n", "train_sampling.top_k=20 changes"),
        ("rollouts: {train_sampling: {min_p: 0.1}}\n", "train_sampling.min_p=0.1 changes"),
    ],
)
def test_options_without_effect_or_invalid_are_errors(
    tmp_path: Path, extra: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, BASE + extra))


def test_unreadable_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="override must look like"):
        load_config(write(tmp_path, BASE), overrides=["steps"])


@pytest.mark.parametrize(
    ("extra", "temperature"),
    [
        ("", 1.0),
        ("rollouts: {train_sampling: {temperature: 0.8, max_tokens: 9}}\n", 0.8),
        ("algorithm: {grpo: {temperature: 0.7}}\n", 0.7),
        (
            "rollouts: {train_sampling: {temperature: 0.6}}\n"
            "algorithm: {grpo: {temperature: 0.6}}\n",
            0.6,
        ),
        ("rollouts: {train_sampling: {max_tokens: 9, top_p: 1.0, top_k: -1}}\n", 1.0),
    ],
)
def test_one_temperature_for_sampling_and_training(
    tmp_path: Path, extra: str, temperature: float
) -> None:
    """The rollouts sample at the temperature the trainer computes its logprobs at."""
    config = load_config(write(tmp_path, BASE + extra))
    assert config.algorithm.grpo.temperature == temperature
    assert config.rollouts.train_sampling["temperature"] == temperature
    # pinned, so an agent's own top_p cannot truncate the behaviour distribution
    assert config.rollouts.train_sampling["top_p"] == 1.0


def test_val_sampling_may_truncate(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, BASE + "rollouts: {val_sampling: {top_p: 0.5}}\n"))
    assert config.rollouts.val_sampling == {"top_p": 0.5}


def test_calc_example_trains_at_the_temperature_it_samples_at() -> None:
    calc = Path(__file__).resolve().parents[2] / "examples" / "calc" / "config.yaml"
    config = load_config(calc)
    assert config.rollouts.train_sampling["temperature"] == 0.8
    assert config.algorithm.grpo.temperature == 0.8


def test_algorithm_defaults_to_grpo_and_stages_chain_named_algorithms(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, BASE))
    assert [stage.name for stage in config.plan()] == ["grpo"]
    chained = load_config(
        write(
            tmp_path,
            BASE + "rollouts: {train_sampling: {temperature: 0.7}}\n"
            "stages: [grpo, {name: grpo, steps: 2}]\n",
        )
    )
    assert [stage.steps for stage in chained.plan()] == [20, 2]
    # every grpo stage trains at the one behaviour temperature
    assert {stage.update_config(seed=0).temperature for stage in chained.plan()} == {0.7}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("algorithm: {name: apo, selection: best}\n", "algorithm.selection: Input should"),
        (
            "stages: [grpo, {name: apo, critic: {base_url: 'https://api.example/v1'}}]\n",
            "critic.base_url is set, so critic.model is needed",
        ),
        ("stages: [grpo, {name: demos, demos: 0}]\n", "stages.1.demos: Input should be"),
        (
            "algorithm: {name: nope}\n",
            "algorithm.name 'nope': no such algorithm .available: grpo, sft, dpo, ppo, apo, demos",
        ),
        (
            "stages: [grpo, nope]\n",
            "stages.1.name 'nope': no such algorithm .available: grpo, sft, dpo, ppo, apo, demos",
        ),
        ("algorithm: grpo\nstages: [grpo]\n", "either algorithm or stages"),
        ("stages: []\n", "stages"),
        (
            "stages: [{name: grpo, grpo: {temperature: 0.5}}, {name: grpo, grpo: "
            "{temperature: 0.9}}]\n",
            "stages.0.grpo.temperature=0.5 and stages.1.grpo.temperature=0.9 differ",
        ),
    ],
)
def test_unknown_or_conflicting_algorithms_are_config_errors(
    tmp_path: Path, extra: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, BASE + extra))


def test_overrides_reach_into_stages_by_index(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, BASE + "stages: [grpo, {name: grpo, steps: 2}]\n"),
        overrides=["stages.0.steps=3", "stages.1.max_minutes=5"],
    )
    assert [(s.steps, s.max_minutes) for s in config.plan()] == [(3, None), (2, 5)]
    with pytest.raises(ConfigError, match="'2' is not an index of a list of 2 items"):
        load_config(
            write(tmp_path, BASE + "stages: [grpo, grpo]\n"), overrides=["stages.2.steps=1"]
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "algorithm: {gruop_size: 4}\n",
            "algorithm.gruop_size: unknown option; did you mean algorithm.group_size?",
        ),
        (
            "algorithm: {grpo: {learnig_rate: 0.1}}\n",
            "algorithm.grpo.learnig_rate: unknown option; did you mean "
            "algorithm.grpo.learning_rate?",
        ),
        (
            "stages: [grpo, {name: sft, sft: {lora: {rr: 4}}}]\n",
            "stages.1.sft.lora.rr: unknown option; did you mean stages.1.sft.lora.r?",
        ),
        (
            "rollouts: {concurency: 2}\n",
            "rollouts.concurency: unknown option; did you mean rollouts.concurrency?",
        ),
        ("zzz: 1\n", "zzz: unknown option (options here: agent, algorithm, cluster, data,"),
    ],
)
def test_an_unknown_key_is_reported_where_it_is_written_with_the_closest_option(
    tmp_path: Path, extra: str, message: str
) -> None:
    """Pydantic's path adds the algorithm's name (``algorithm.grpo.gruop_size``): not a key."""
    path = tmp_path / "c.yaml"
    path.write_text(BASE + extra)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert message in str(raised.value)


def test_configs_without_run_dir_get_a_folder_each_named_after_the_file(tmp_path: Path) -> None:
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(BASE, encoding="utf-8")
    second.write_text(BASE, encoding="utf-8")
    assert load_config(first).run_dir == tmp_path / "runs" / "first"
    assert load_config(second).run_dir == tmp_path / "runs" / "second"
    # An explicit run_dir (in the file or --set) still wins.
    assert load_config(first, overrides=[f"run_dir={tmp_path / 'x'}"]).run_dir == tmp_path / "x"


def test_a_yaml_error_names_the_config_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "model: tiny\nagent: a:b\ndata:\n  train: t.jsonl\n   val: v.jsonl\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert f"{path}, line 5, column 7: mapping values are not allowed here" in message
    assert "'val: v.jsonl'" in message and "<unicode string>" not in message
