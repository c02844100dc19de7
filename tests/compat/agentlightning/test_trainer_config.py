"""The fulmen config an ``agl.Trainer`` call amounts to: ``fit``'s own arguments fill it.

A file naming only ``model`` and ``run_dir`` is enough when ``fit`` gives the agent and the
datasets; without a file, a VERL config names the model, and an ``LLM`` in
``initial_resources`` the endpoint; anything else is refused naming the keys to write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import fulmen.compat.agentlightning as agl
from fulmen.compat.agentlightning.trainer_config import DRIVEN_TASKS, FIT_TRAIN, FIT_VAL
from tests.compat.agentlightning import toy_agents


def minimal(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny", "run_dir": "run", **extra}))
    return path


def test_model_and_run_dir_are_enough_when_fit_gives_the_rest(tmp_path: Path) -> None:
    trainer = agl.Trainer(config=minimal(tmp_path), n_runners=3)
    agent = toy_agents.ToyLitAgent()
    config = trainer.train_config(agent, 8, has_val=True)
    assert config.agent == "tests.compat.agentlightning.toy_agents:ToyLitAgent"
    assert (config.data.train, config.data.val) == (FIT_TRAIN, FIT_VAL)
    assert config.validation is not None and config.rollouts.concurrency == 3
    assert config.run_dir == tmp_path / "run"
    # without validation tasks nothing is validated; a decorated function is named as itself
    config = trainer.train_config(toy_agents.toy_sync_function, 8)
    assert config.validation is None and config.data.val is None
    assert config.agent == "tests.compat.agentlightning.toy_agents:toy_sync_function"


def test_what_the_file_says_wins_over_fit(tmp_path: Path) -> None:
    path = minimal(
        tmp_path,
        agent="my_agent:agent",
        data={"train": "tasks.jsonl", "val": "val.jsonl"},
        validation={"every": 2},
    )
    config = agl.Trainer(config=path).train_config(toy_agents.ToyLitAgent(), 8, has_val=True)
    assert config.agent == "my_agent:agent"
    assert (config.data.train, config.data.val) == (
        str(tmp_path / "tasks.jsonl"), str(tmp_path / "val.jsonl"),
    )  # fmt: skip
    assert config.validation is not None and config.validation.every == 2


def test_apo_scores_on_val_dataset_and_user_overrides_win(tmp_path: Path) -> None:
    trainer = agl.Trainer(
        config=minimal(tmp_path),
        algorithm=agl.APO(val_batch_size=5, beam_rounds=2),
        initial_resources={"room_prompt": agl.PromptTemplate(template="{x}")},
        overrides=["algorithm.rounds=1"],
    )
    config = trainer.train_config(toy_agents.ToyLitAgent(), 8, has_val=True)
    assert config.algorithm.name == "apo"
    assert config.algorithm.score_tasks is None  # type: ignore[union-attr]  # val_dataset
    assert config.algorithm.prompt == "room_prompt"  # type: ignore[union-attr]
    assert config.algorithm.rounds == 1  # type: ignore[union-attr]  # the override, not 2
    assert config.validation is not None and config.validation.max_tasks is None


def test_verl_needs_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    verl = agl.VERL(
        {
            "data": {"train_batch_size": 2, "max_prompt_length": 64, "max_response_length": 8},
            "actor_rollout_ref": {
                "rollout": {"n": 4},
                "actor": {"optim": {"lr": 0.01}, "clip_ratio_high": 0.28},
                "model": {"path": "tiny", "lora_rank": 8, "lora_alpha": 16},
            },
            "trainer": {"total_epochs": 2, "test_freq": 3},
        }
    )
    config = agl.Trainer(algorithm=verl, n_runners=8).train_config(toy_agents.ToyLitAgent(), 4)
    assert config.model == "tiny" and config.algorithm.name == "grpo"
    grpo = config.algorithm.grpo  # type: ignore[attr-defined]
    assert (grpo.learning_rate, grpo.lora.r, grpo.clip_high) == (0.01, 8, 0.28)
    assert config.algorithm.steps == 4  # type: ignore[union-attr]  # 2 epochs of 4 tasks / 2
    assert config.validation is None  # test_freq, but no val_dataset: nothing to validate on
    assert config.run_dir.parent == tmp_path / "runs" and config.run_dir.name.startswith("agl-")
    written = yaml.safe_load((config.run_dir / "agl-config.yaml").read_text())
    assert written == {"model": "tiny", "run_dir": str(config.run_dir)}
    # a second trainer starts a run of its own, as a 0.x script run again did
    again = agl.Trainer(algorithm=verl).train_config(toy_agents.ToyLitAgent(), 4)
    assert again.run_dir != config.run_dir


def test_without_a_model_the_refusal_names_what_to_write(tmp_path: Path) -> None:
    for trainer in (
        agl.Trainer(algorithm=agl.APO()),
        agl.Trainer(initial_resources={"p": agl.PromptTemplate(template="{x}")}),
    ):
        with pytest.raises(agl.NotSupported, match=r"without config=.*model:.*run_dir:"):
            trainer.train_config(toy_agents.ToyLitAgent(), 4)


def test_a_driven_algorithm_gets_the_endpoint_of_its_llm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # its run directory is a fresh runs/agl-...

    @agl.algo
    async def custom(*, store: Any) -> None:
        pass

    llm = agl.LLM(endpoint="http://127.0.0.1:5/v1", model="served-name")
    trainer = agl.Trainer(algorithm=custom, initial_resources={"main_llm": llm})
    config = trainer.train_config(toy_agents.ToyLitAgent(), algorithm=custom)
    assert (config.engine.kind, config.engine.url, config.model) == (
        "endpoint", "http://127.0.0.1:5/v1", "served-name",
    )  # fmt: skip
    assert config.data.train == DRIVEN_TASKS
    with pytest.raises(agl.NotSupported, match="algorithm: in the fulmen config"):
        agl.Trainer(
            algorithm=custom, config=minimal(tmp_path, algorithm={"steps": 3})
        ).train_config(toy_agents.ToyLitAgent(), algorithm=custom)


async def test_a_synchronous_run_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from fulmen.compat.agentlightning.driver import drive

    class Sync(agl.Algorithm):
        def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:
            raise AssertionError("not run")

    trainer = agl.Trainer(algorithm=Sync(), config=minimal(tmp_path))
    config = trainer.train_config(toy_agents.ToyLitAgent(), algorithm=Sync())
    with pytest.raises(agl.NotSupported, match="synchronous run"):
        await drive(
            Sync(), trainer=trainer, config=config, agent=toy_agents.ToyLitAgent(), train=None,
            val=None, initial_resources={}, adapter=None,
        )  # fmt: skip
    assert not (tmp_path / "run").exists()


def test_a_verl_key_and_the_file_disagreeing_is_refused(tmp_path: Path) -> None:
    verl = agl.VERL({"actor_rollout_ref": {"model": {"path": "gemma-3-270m"}}})
    trainer = agl.Trainer(algorithm=verl, config=minimal(tmp_path))
    with pytest.raises(agl.NotSupported, match=r"model\.path='gemma-3-270m' with model: 'tiny'"):
        trainer.train_config(toy_agents.ToyLitAgent(), 4)
    same = agl.VERL({"actor_rollout_ref": {"model": {"path": "tiny"}}})
    config = agl.Trainer(algorithm=same, config=minimal(tmp_path)).train_config(
        toy_agents.ToyLitAgent(), 4
    )
    assert config.model == "tiny" and config.run_dir == tmp_path / "run"
