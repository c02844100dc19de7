"""``fulmen train`` with ``algorithm: sft`` on the real built-in engine and the ``tiny`` model:
rejection sampling (LoRA and full weights), and distillation from a store of a teacher's
text-only calls."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulmen.cli.main import main
from fulmen.engines.models import resolve_model
from fulmen.store import open_store
from fulmen.store.reading import read_llm_calls
from fulmen.tracing import semconv
from fulmen.trainer.metrics import read_metrics
from fulmen.types import (
    AttemptStatus,
    LLMCall,
    LLMCallCreate,
    LLMChoice,
    Mode,
    RolloutCreate,
    SpanCreate,
)

torch = pytest.importorskip("torch")
pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[3] / "examples" / "toy" / "config.yaml"
SFT = (
    "algorithm={name: sft, rounds: 2, attempts_per_task: 4, tasks_per_round: 8, "
    "min_reward: 0.1, sft: {learning_rate: 0.01, lora: {r: 8, alpha: 16}}}"
)
FULL_SFT = (
    "algorithm={{name: sft, rounds: {rounds}, attempts_per_task: 4, tasks_per_round: 8, "
    "min_reward: 0.1, sft: {{finetune: full, learning_rate: 0.001}}}}"
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


async def calls_of(run_dir: Path, prefix: str) -> list[LLMCall]:
    """The recorded calls of the rollouts whose id starts with the run's id and ``prefix``."""
    from fulmen.store.reading import iter_rollouts
    from fulmen.types import RolloutQuery

    run_id = json.loads((run_dir / "state.json").read_text())["run_id"]
    calls: list[LLMCall] = []
    async with open_store(f"sqlite:///{run_dir / 'store.db'}", watchdog_interval=None) as store:
        async for rollout in iter_rollouts(store, RolloutQuery()):
            if rollout.rollout_id.startswith(f"{run_id}-{prefix}"):
                calls.extend(await read_llm_calls(store, rollout.rollout_id))
    return calls


def models_of(run_dir: Path, prefix: str) -> set[str]:
    """The model names the calls of the rollouts whose id starts with ``prefix`` asked for."""
    return {str(call.request["model"]) for call in asyncio.run(calls_of(run_dir, prefix))}


def logprob_gaps(run_dir: Path, prefix: str, model: Any) -> list[float]:
    """|engine-recorded - ``model``'s logprob| of every completion token of ``prefix``'s calls.

    The toy's sampling is plain (temperature 1 for training, greedy for validation), so a
    float32 model with the engine's weights gives the recorded logprobs up to rounding.
    """
    from ..builders import model_logprobs

    gaps: list[float] = []
    calls = asyncio.run(calls_of(run_dir, prefix))
    assert calls, prefix
    for call in calls:
        (choice,) = call.choices
        assert choice.token_ids and choice.logprobs
        ours = model_logprobs(model, list(call.prompt_token_ids or []), choice.token_ids)
        gaps.extend(abs(a - b) for a, b in zip(choice.logprobs, ours, strict=True))
    return gaps


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
    assert models_of(run_dir, "g1-r0-") == {"tiny"}
    assert models_of(run_dir, "g1-r1-") == {"policy-1"}
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["step"], state["adapter"]) == (2, "adapters/round-002")


@pytest.mark.slow
def test_full_sft_trains_every_weight_and_the_engine_serves_them_across_a_restart(
    tmp_path: Path,
) -> None:
    from transformers import AutoModelForCausalLM

    run_dir = tmp_path / "run"
    records = train(run_dir, FULL_SFT.format(rounds=1), "validation.max_tasks=4")
    (first,) = [r for r in records if "sft/kept_fraction" in r]
    assert 0 < first["sft/kept_fraction"] < 1
    assert first["sft/logprob_after"] > first["sft/logprob_before"] + 0.5, first
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["step"], state["weights"], state["adapter"]) == (1, "weights/round-001", None)
    assert not (run_dir / "adapters").exists()
    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny")).eval()
    tuned = AutoModelForCausalLM.from_pretrained(run_dir / "weights" / "round-001").eval()
    original = dict(base.named_parameters())
    unchanged = [n for n, p in tuned.named_parameters() if torch.equal(p, original[n])]
    assert not unchanged  # every weight was trained, not an adapter
    # The validation after the round ran on the reloaded weights, under the base model's name:
    # the engine's logprobs are the tuned model's, and no longer the base's.
    assert models_of(run_dir, "g1-val1-") == {"tiny"}
    assert max(logprob_gaps(run_dir, "g1-val0-", base)) < 1e-3
    assert max(logprob_gaps(run_dir, "g1-val1-", tuned)) < 1e-3
    assert max(logprob_gaps(run_dir, "g1-val1-", base)) > 0.1

    # A second start resumes after round 1: the engine serves round 1's weights again before
    # round 2 samples, and round 2 trains on from round 1's checkpoint.
    records = train(run_dir, FULL_SFT.format(rounds=2), "validation.max_tasks=4")
    (second,) = [r for r in records if "sft/kept_fraction" in r and r["step"] == 2]
    assert second["sft/logprob_after"] > second["sft/logprob_before"] + 0.5, second
    assert max(logprob_gaps(run_dir, "g2-r1-", tuned)) < 1e-3
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["step"], state["weights"]) == (2, "weights/round-002")
    assert sorted(p.name for p in (run_dir / "weights").iterdir()) == ["round-001", "round-002"]
    # round 2 trained on from round 1's weights, not from the base again
    later = dict(
        AutoModelForCausalLM.from_pretrained(run_dir / "weights" / "round-002").named_parameters()
    )
    moved = dict(tuned.named_parameters())
    assert distance(later, moved) < distance(later, original)


def distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Euclidean distance between two models' weights (same parameter names)."""
    return sum(float((a[n].detach() - b[n].detach()).pow(2).sum()) for n in a) ** 0.5


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
