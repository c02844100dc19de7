"""``fulmen train`` with ``algorithm: sft`` on the real built-in engine and the ``tiny`` model:
rejection sampling, and distillation from a store of a teacher's text-only calls."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.store.reading import read_llm_calls
from fulmen.tracing import semconv
from fulmen.trainer.metrics import read_metrics
from fulmen.types import AttemptStatus, LLMCallCreate, LLMChoice, Mode, RolloutCreate, SpanCreate

pytest.importorskip("torch")
pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[3] / "examples" / "toy" / "config.yaml"
SFT = (
    "algorithm={name: sft, rounds: 2, attempts_per_task: 4, tasks_per_round: 8, "
    "min_reward: 0.1, sft: {learning_rate: 0.01, lora: {r: 8, alpha: 16}}}"
)


@pytest.fixture(autouse=True)
def example_imports_restored() -> Iterator[None]:
    """Forget the example's ``agent`` module and path afterwards: ``fulmen train`` in-process
    imports ``examples/toy/agent.py`` as ``agent``, which another example's test would get."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if name in ("agent", "tasks"):
            del sys.modules[name]


def train(run_dir: Path, *overrides: str) -> list[dict[str, Any]]:
    args = ["train", str(TOY), "--set", f"run_dir={run_dir}"]
    for override in overrides:
        args += ["--set", override]
    assert main(args) == 0
    return read_metrics(run_dir / "metrics.jsonl")


async def models_of(run_dir: Path, prefix: str) -> set[str]:
    """The model names the calls of the rollouts whose id starts with ``prefix`` asked for."""
    from fulmen.store.reading import iter_rollouts
    from fulmen.types import RolloutQuery

    names: set[str] = set()
    async with open_store(f"sqlite:///{run_dir / 'store.db'}", watchdog_interval=None) as store:
        async for rollout in iter_rollouts(store, RolloutQuery()):
            if rollout.rollout_id.startswith(prefix):
                for record in await read_llm_calls(store, rollout.rollout_id):
                    names.add(str(record.request["model"]))
    return names


@pytest.mark.slow
def test_rejection_sampling_raises_the_likelihood_of_the_kept_completions(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    records = train(run_dir, SFT, "validation.max_tasks=4")
    rounds = [r for r in records if "sft/kept_fraction" in r]
    assert [r["step"] for r in rounds] == [1, 2]
    for r in rounds:
        assert r["sft/rollouts"] == 32  # 8 tasks x 4 attempts
        assert 0 < r["sft/kept_fraction"] < 1  # the threshold rejected some, kept some
        assert r["sft/examples"] == r["sft/kept_rollouts"]  # one call per toy rollout
        assert r["sft/retokenized"] == 0  # the student's own calls carry their ids
        # the fine-tuning measurably raised the likelihood of what it trained on
        assert r["sft/logprob_after"] > r["sft/logprob_before"] + 0.5, r
    # validation before and after, in the same stream
    assert [r["step"] for r in records if "val/reward_mean" in r] == [0, 2]
    # round 2 sampled with the adapter round 1 hot-loaded into the engine
    assert asyncio.run(models_of(run_dir, "g1-r0-")) == {"tiny"}
    assert asyncio.run(models_of(run_dir, "g1-r1-")) == {"policy-1"}
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["step"], state["adapter"]) == (2, "adapters/round-002")


async def fill_teacher_store(url: str, prompts: list[str]) -> None:
    """A teacher endpoint's rollouts as the gateway records a text-only upstream: no ids."""
    async with open_store(url, watchdog_interval=None) as store:
        await store.enqueue(
            [
                RolloutCreate(input={"prompt": p}, task_id=f"t{i}", rollout_id=f"teach{i}")
                for i, p in enumerate(prompts)
            ]
        )
        for _ in prompts:
            (claim,) = await store.claim("teacher")
            rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
            prompt = claim.rollout.input["prompt"]
            await store.add_llm_calls(
                [
                    LLMCallCreate(
                        call_id=f"{rid}-c",
                        rollout_id=rid,
                        attempt_id=aid,
                        request={
                            "model": "teacher",
                            "messages": [{"role": "user", "content": prompt}],
                        },
                        response={
                            "choices": [{"message": {"role": "assistant", "content": "a a a a"}}]
                        },
                        choices=[LLMChoice(text="a a a a")],
                        is_token_level=False,
                        started_at=1.0,
                    )
                ]
            )
            await store.add_spans(
                [
                    SpanCreate(
                        rollout_id=rid,
                        attempt_id=aid,
                        trace_id="ab" * 16,
                        span_id=f"{rid}-reward",
                        name=semconv.SPAN_REWARD,
                        attributes={
                            semconv.REWARD_NAMES: ["reward"],
                            semconv.REWARD_VALUES: [1.0],
                            semconv.REWARD_PRIMARY: "reward",
                        },
                        start_time=2.0,
                    )
                ]
            )
            await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)


@pytest.mark.slow
def test_distillation_from_a_store_of_text_only_teacher_calls_is_flagged(tmp_path: Path) -> None:
    teacher = f"sqlite:///{tmp_path / 'teacher.db'}"
    asyncio.run(fill_teacher_store(teacher, [f"Task {i}: write the letter a." for i in range(12)]))
    records = train(
        tmp_path / "run",
        f"algorithm={{name: sft, source: {{store: '{teacher}', filter: {{mode: {Mode.TRAIN}}}}}, "
        "sft: {learning_rate: 0.01, epochs: 2, lora: {r: 8, alpha: 16}}}",
        "validation=null",
        "data.val=null",
    )
    (round_,) = [r for r in records if "sft/kept_fraction" in r]
    assert round_["sft/rollouts"] == 12
    assert round_["sft/examples"] == round_["sft/retokenized"] == 12  # flagged, every one
    assert round_["sft/logprob_after"] > round_["sft/logprob_before"] + 0.5, round_
