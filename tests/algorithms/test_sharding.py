"""Sharded updates (``data_parallel.strategy: fsdp``): two gloo ranks under FSDP2 take the step
one process takes, serve what it would serve, and resume from a sharded checkpoint exactly.

The ranks are real processes (spawned by ``open_update_workers``, joined over gloo); the test
process is rank 0 and holds a shard, so whole weights are compared through
``sharding.gather_trainable`` (the gather rank 0 serves from).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from fulmen.algorithms.grpo.config import GRPOConfig  # noqa: E402
from fulmen.algorithms.grpo.updater import GRPOUpdater  # noqa: E402
from fulmen.algorithms.parallel import sharding  # noqa: E402
from fulmen.algorithms.parallel.config import (  # noqa: E402
    DataParallelConfig,
    check_sharded_resume,
)
from fulmen.algorithms.parallel.workers import (  # noqa: E402
    UpdaterSpec,
    UpdateWorkers,
    open_update_workers,
)
from fulmen.algorithms.policy import load_causal_lm  # noqa: E402
from fulmen.algorithms.sft.config import SFTConfig  # noqa: E402
from fulmen.algorithms.sft.updater import SFTUpdater  # noqa: E402
from fulmen.errors import ConfigError  # noqa: E402
from tests.algorithms.models import tiny_llama  # noqa: E402
from tests.algorithms.test_data_parallel import (  # noqa: E402
    LORA_STEP_METRICS,
    TOLERANCE,
    _batch,
    lora_case,
    sft_examples,
    step_metric,
)

FSDP = DataParallelConfig(world_size=2, backend="gloo", timeout_s=60, strategy="fsdp")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny")
    tiny_llama(seed=3, vocab=64, hidden=32).save_pretrained(path)
    return path


@pytest.fixture(scope="class")
def workers() -> Iterator[UpdateWorkers]:
    """One spawned rank 1: each test attaches (and shards) its own engine on it."""
    opened = open_update_workers(FSDP)
    assert opened is not None
    try:
        yield opened
    finally:
        opened.close()
    assert all(p.poll() is not None for p in opened.spawned)


def _whole(updater: Any) -> dict[str, torch.Tensor]:
    if sharding.is_sharded(updater.model):
        return sharding.everywhere(updater, sharding.gather_trainable)
    return {n: p.detach() for n, p in updater.model.named_parameters() if p.requires_grad}


def _difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[n] - b[n]).detach().abs().max()) for n in a)


def _attach(workers: UpdateWorkers, updater: Any, model_dir: Path) -> None:
    workers.attach(updater, UpdaterSpec.of(updater, model_dir), config=FSDP)
    assert sharding.is_sharded(updater.model)


class TestOnTwoShardedRanks:
    """Rank 1 is one spawned process for the class (its process group is this one's)."""

    @pytest.mark.parametrize("finetune", ["lora", "full"])
    def test_two_sharded_ranks_take_the_grpo_step_one_process_takes(
        self, model_dir: Path, workers: UpdateWorkers, finetune: str
    ) -> None:
        settings = {"lora": {"r": 4, "alpha": 8}} if finetune == "lora" else {}
        config = GRPOConfig(
            finetune=finetune,  # type: ignore[arg-type]
            learning_rate=1e-2,
            micro_batch_tokens=48,  # several micro-batches, not as many on each rank
            loss_normalization="token",
            kl_coef=0.05,  # the reference's forwards are collectives too
            **settings,  # type: ignore[arg-type]
        )
        single = GRPOUpdater(load_causal_lm(model_dir), config=config)
        sharded = GRPOUpdater(load_causal_lm(model_dir), config=config)
        batch = _batch(single.model)
        _attach(workers, sharded, model_dir)
        # a full fine-tune's KL reference is a frozen copy: sharded too, no rank holds it whole
        assert len(sharded.frozen) == (finetune == "full")
        assert all(sharding.is_sharded(copy) for copy in sharded.frozen)
        for _ in range(2):
            expected = single.train_step(batch)
            got = sharded.train_step(batch)
            assert got["updated"] == expected["updated"] == 1.0
            for key in ("loss", "grad_norm", "entropy", "clip_fraction", "kl"):
                assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
            assert got["micro_batches"] == expected["micro_batches"]  # fillers are not counted
        difference = _difference(_whole(single), _whole(sharded))
        print(f"fsdp grpo {finetune}: max |w_single - w_sharded| = {difference:.3g}")
        assert difference <= TOLERANCE
        fresh = GRPOUpdater(load_causal_lm(model_dir), config=config)
        assert _difference(_whole(single), _whole(fresh)) > 1e-4  # the steps did move the weights

    def test_checkpointed_activations_and_bfloat16_compute_under_sharding(
        self, model_dir: Path, workers: UpdateWorkers
    ) -> None:
        config = GRPOConfig(
            learning_rate=1e-2,
            micro_batch_tokens=48,
            gradient_checkpointing=True,  # each layer's forward runs again inside its backward
            lora={"r": 4, "alpha": 8},  # type: ignore[arg-type]
        )
        single = GRPOUpdater(load_causal_lm(model_dir), config=config)
        sharded = GRPOUpdater(load_causal_lm(model_dir), config=config)
        batch = _batch(single.model)
        _attach(workers, sharded, model_dir)
        expected, got = single.train_step(batch), sharded.train_step(batch)
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5, abs=1e-7)
        assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
        assert _difference(_whole(single), _whole(sharded)) <= TOLERANCE

        mixed = GRPOUpdater(load_causal_lm(model_dir), config=config)
        bf16 = FSDP.model_copy(update={"param_dtype": "bfloat16"})
        workers.attach(mixed, UpdaterSpec.of(mixed, model_dir), config=bf16)
        start = _whole(mixed)
        first = mixed.train_step(batch)
        # the layers compute in bfloat16 (8 bits of mantissa): near the float32 step, not equal
        assert first["grad_norm"] == pytest.approx(expected["grad_norm"], rel=0.05)
        assert first["grad_norm"] != pytest.approx(expected["grad_norm"], rel=1e-6)
        after = _whole(mixed)
        assert all(t.dtype == torch.float32 for t in after.values())  # the shards stay float32
        assert _difference(start, after) > 1e-4

    def test_a_sharded_policy_is_served_whole(
        self, model_dir: Path, workers: UpdateWorkers, tmp_path: Path
    ) -> None:
        config = GRPOConfig(learning_rate=1e-2, lora={"r": 4, "alpha": 8})  # type: ignore[arg-type]
        single = GRPOUpdater(load_causal_lm(model_dir), config=config)
        sharded = GRPOUpdater(load_causal_lm(model_dir), config=config)
        batch = _batch(single.model)
        _attach(workers, sharded, model_dir)
        single.train_step(batch)
        sharded.train_step(batch)
        single.save_adapter(tmp_path / "single")
        sharded.save_adapter(tmp_path / "sharded")
        from safetensors.torch import load_file

        a = load_file(str(tmp_path / "single" / "adapter_model.safetensors"))
        b = load_file(str(tmp_path / "sharded" / "adapter_model.safetensors"))
        assert a.keys() == b.keys() and a
        assert _difference(a, b) <= TOLERANCE

        full = GRPOConfig(finetune="full", learning_rate=1e-3)
        single = GRPOUpdater(load_causal_lm(model_dir), config=full)
        sharded = GRPOUpdater(load_causal_lm(model_dir), config=full)
        _attach(workers, sharded, model_dir)
        single.train_step(batch)
        sharded.train_step(batch)
        single.save_model(tmp_path / "single-full")
        sharded.save_model(tmp_path / "sharded-full")
        reloaded = load_causal_lm(tmp_path / "sharded-full")
        expected = load_causal_lm(tmp_path / "single-full")
        assert _difference(
            dict(reloaded.named_parameters()), dict(expected.named_parameters())
        ) <= (TOLERANCE)

    def test_a_sharded_run_resumes_with_identical_next_step(
        self, model_dir: Path, workers: UpdateWorkers, tmp_path: Path
    ) -> None:
        config = GRPOConfig(learning_rate=1e-2, micro_batch_tokens=48, lora={"r": 4, "alpha": 8})  # type: ignore[arg-type]
        first = GRPOUpdater(load_causal_lm(model_dir), config=config)
        batch = _batch(first.model)
        _attach(workers, first, model_dir)
        first.train_step(batch)
        first.save_checkpoint(tmp_path / "step-1")
        assert (tmp_path / "step-1" / "shards" / ".metadata").is_file()
        assert len(list((tmp_path / "step-1" / "shards").glob("*.distcp"))) == 2  # one per rank
        went_on = first.train_step(batch)
        after = _whole(first)

        resumed = GRPOUpdater(load_causal_lm(model_dir), config=config)
        resumed.load_checkpoint(tmp_path / "step-1")
        assert resumed.step == 1
        _attach(workers, resumed, model_dir)
        again = resumed.train_step(batch)
        for key in ("loss", "grad_norm", "entropy", "clip_fraction", "policy_loss"):
            assert again[key] == went_on[key], key  # identical, not close: same shards, same order
        assert _difference(after, _whole(resumed)) == 0.0

        alone = GRPOUpdater(load_causal_lm(model_dir), config=config)
        alone.load_checkpoint(tmp_path / "step-1")
        with pytest.raises(ConfigError, match="sharded state"):
            workers.attach(alone, UpdaterSpec.of(alone, model_dir))  # strategy replicate

    def test_two_sharded_ranks_take_the_sft_steps_one_process_takes(
        self, model_dir: Path, workers: UpdateWorkers
    ) -> None:
        config = SFTConfig(
            seed=0, learning_rate=1e-2, batch_size=4, epochs=2, lora={"r": 4, "alpha": 8}
        )  # type: ignore[arg-type]
        examples = sft_examples()
        single = SFTUpdater(load_causal_lm(model_dir), config=config)
        sharded = SFTUpdater(load_causal_lm(model_dir), config=config)
        _attach(workers, sharded, model_dir)
        assert sharded.mean_logprob(examples) == pytest.approx(
            single.mean_logprob(examples), rel=1e-6
        )
        expected = single.train(examples)
        got = sharded.train(examples)
        assert got["sft/steps"] == expected["sft/steps"] == 6
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5)
        assert _difference(_whole(single), _whole(sharded)) <= TOLERANCE

    @pytest.mark.parametrize("kind", ["ppo", "dpo"])
    def test_two_sharded_ranks_take_the_ppo_and_dpo_steps_one_process_takes(
        self, model_dir: Path, workers: UpdateWorkers, kind: str
    ) -> None:
        make, batch = lora_case(kind, model_dir)
        single, sharded = make(), make()
        _attach(workers, sharded, model_dir)  # PPO's value head is a unit of its own
        for _ in range(2):  # PPO's second step reads the value head the first one trained
            expected = single.train_step(batch)
            got = sharded.train_step(batch)
            assert got["updated"] == expected["updated"] == 1.0
            for key in LORA_STEP_METRICS[kind]:
                assert got[key] == step_metric(key, expected[key]), key
        difference = _difference(_whole(single), _whole(sharded))
        print(f"fsdp {kind}: max |w_single - w_sharded| = {difference:.3g}")
        assert difference <= TOLERANCE
        assert _difference(_whole(single), _whole(make())) > 1e-4

    def test_a_sharded_ppo_run_resumes_with_its_value_head(
        self, model_dir: Path, workers: UpdateWorkers, tmp_path: Path
    ) -> None:
        make, batch = lora_case("ppo", model_dir)
        first = make()
        _attach(workers, first, model_dir)
        first.train_step(batch)
        first.save_checkpoint(tmp_path / "step-1")
        went_on = first.train_step(batch)

        resumed = make()
        resumed.load_checkpoint(tmp_path / "step-1")
        _attach(workers, resumed, model_dir)
        again = resumed.train_step(batch)
        assert again["ppo/value_mean"] != 0.0  # the head starts at zero: this one was loaded
        for key in LORA_STEP_METRICS["ppo"]:
            assert again[key] == went_on[key], key  # identical: same shards, same order
        assert _difference(_whole(first), _whole(resumed)) == 0.0


def test_fsdp_options_are_checked() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="param_dtype"):
        DataParallelConfig(world_size=2, param_dtype="bfloat16")
    with pytest.raises(ValidationError):
        DataParallelConfig(world_size=2, strategy="zero3")  # type: ignore[arg-type]
    shards = Path("run/checkpoints/step-00003/shards")
    for alone in (None, DataParallelConfig(world_size=2)):  # one process, or replicate
        with pytest.raises(ConfigError, match="step-00003 holds sharded state"):
            check_sharded_resume(shards, alone)
    check_sharded_resume(shards, FSDP)
    check_sharded_resume(None, None)


TOY = Path(__file__).resolve().parents[2] / "examples" / "toy"


def _local_ranks_alive() -> list[int]:
    """Pids of this process's children that are local update ranks."""
    children: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended since the listing
            children += [int(pid) for pid in (task / "children").read_text().split()]
    ranks = []
    for pid in children:
        with contextlib.suppress(OSError):
            if b"fulmen.algorithms.parallel.rank_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                ranks.append(pid)
    return ranks


@pytest.mark.slow
def test_toy_agent_learns_with_a_sharded_update(tmp_path: Path) -> None:
    from fulmen.trainer.config import load_config
    from fulmen.trainer.metrics import read_metrics
    from fulmen.trainer.trainer import Trainer

    pytest.importorskip("openai")
    steps = 18
    config = load_config(
        TOY / "config.yaml",
        overrides=[
            f"run_dir={tmp_path / 'run'}",
            f"algorithm.steps={steps}",
            f"validation.every={steps}",
            "algorithm.grpo.learning_rate=0.025",  # as the replicated two-rank test
            "algorithm.checkpoint_every=6",
            "algorithm.data_parallel={world_size: 2, backend: gloo, timeout_s: 120, "
            "strategy: fsdp}",
        ],
    )
    history = Trainer(config).fit()
    assert len(history) == steps
    trained = [h for h in history if h["updated"] == 1.0]
    assert all(h["micro_batches"] >= 2 for h in trained)  # both ranks ran their rollouts
    assert all(h["logprob_gap"] < 1e-4 for h in trained)  # the gathered adapter is served
    val = [
        r["val/reward_mean"]
        for r in read_metrics(config.run_dir / "metrics.jsonl")
        if "val/reward_mean" in r
    ]
    before, after = val
    assert after >= 0.8 > 0.3 > before, f"validation reward {before:.3f} -> {after:.3f}"
    first, last = [h["reward/mean"] for h in history[:3]], [h["reward/mean"] for h in history[-3:]]
    assert sum(last) / 3 > sum(first) / 3 + 0.4, (first, last)
    assert list((config.run_dir / "checkpoints").glob("step-*/shards/.metadata"))
    assert _local_ranks_alive() == []

    # ``fulmen train`` again with two more steps: the loop resumes from the sharded checkpoint
    more = config.model_copy(
        update={"algorithm": config.algorithm.model_copy(update={"steps": 20})}
    )
    resumed = Trainer(more).fit()
    assert len(resumed) == 2  # steps 19 and 20: the first 18 were not run again
    assert all(h["logprob_gap"] < 1e-4 for h in resumed if h["updated"] == 1.0)


@pytest.mark.slow
def test_fulmen_train_runs_ppo_on_sharded_ranks(tmp_path: Path) -> None:
    """PPO through the whole stack on two sharded ranks: built from the stage's config on the
    other rank (the toy's defaults, which PPO's checks would refuse if every default were
    re-sent as given), served from the gathered adapter, checkpointed in shards."""
    from fulmen.trainer.config import load_config
    from fulmen.trainer.trainer import Trainer

    pytest.importorskip("openai")
    config = load_config(
        TOY / "config.yaml",
        overrides=[
            f"run_dir={tmp_path / 'run'}",
            "algorithm={name: ppo, steps: 2, tasks_per_step: 8, group_size: 1, "
            "ppo: {learning_rate: 0.02, value_learning_rate: 0.002, lora: {r: 8, alpha: 16}}, "
            "data_parallel: {world_size: 2, backend: gloo, timeout_s: 120, strategy: fsdp}}",
            "validation=null",
        ],
    )
    history = Trainer(config).fit()
    assert [h["updated"] for h in history] == [1.0, 1.0]
    assert all(h["ppo/rollouts"] == 8 for h in history)
    # each step's rollouts were sampled by the adapter the ranks trained, gathered to rank 0
    assert all(h["mismatch/gap_max"] < 1e-4 for h in history)
    assert history[-1]["ppo/value_mean"] != 0.0  # the value head (held whole) was trained
    assert list((config.run_dir / "checkpoints").glob("step-*/shards/.metadata"))
    assert _local_ranks_alive() == []
