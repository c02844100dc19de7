"""Offline DPO: ``run_dpo`` with a source pairs the store's rollouts once and trains on them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fulmen.algorithms.dpo import DPOAlgorithmConfig, DPOConfig
from fulmen.algorithms.dpo.loop import run_dpo
from fulmen.algorithms.lora import LoraSettings
from fulmen.algorithms.source import StoreSource
from fulmen.transitions.trajectory import AttemptRecords
from fulmen.types import LLMCall, LLMChoice
from tests.transitions.factories import reward_span

from ..models import tiny_llama

pytest.importorskip("peft")


def _attempt(rid: str, task: str, prompt: list[int], completion: list[int], reward: float):
    call = LLMCall(
        call_id=f"{rid}-c1",
        rollout_id=rid,
        attempt_id=f"{rid}-a",
        prompt_token_ids=prompt,
        choices=[LLMChoice(token_ids=completion, logprobs=[-1.0] * len(completion))],
        is_token_level=True,
        response_id=f"{rid}-resp",
        started_at=0.0,
        sequence=1,
    )
    span = reward_span(2, reward, source="return", rollout_id=rid)
    return AttemptRecords(
        rollout_id=rid, attempt_id=f"{rid}-a", task_id=task, calls=[call], spans=[span]
    )


@dataclass
class _Run:
    run_dir: Path
    model_path: Path
    seed: int = 0
    success_threshold: float = 1.0

    def variable(self, name: str) -> str | None:
        return None  # no $FULMEN_PYTHON: the update runs in this process


@dataclass
class _Rollouts:
    source_attempts: list[AttemptRecords]
    reads: int = 0

    async def read_source(self, source: StoreSource) -> list[AttemptRecords]:
        self.reads += 1
        return self.source_attempts


@dataclass
class _Policy:
    version: str | None = None
    adapter: Path | None = None
    weights: Path | None = None
    role_adapters: dict[str, Path] = field(default_factory=dict)
    served: list[Path] = field(default_factory=list)

    async def serve_adapter(self, adapter_dir: Path, step: int, *, keep_loaded: int = 1) -> None:
        self.served.append(adapter_dir)
        self.version = adapter_dir.name


@dataclass
class _Progress:
    step: int = 0
    checkpoint: Path | None = None
    validation_every: int | None = None
    logged: list[dict[str, float]] = field(default_factory=list)

    def save(self, step: int, *, checkpoint: Path | None = None) -> None:
        self.step, self.checkpoint = step, checkpoint

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.logged.append(metrics)


@dataclass
class _Context:
    """The few services offline DPO uses (``AlgorithmContext``)."""

    run: _Run
    rollouts: _Rollouts
    policy: _Policy = field(default_factory=_Policy)
    progress: _Progress = field(default_factory=_Progress)


def test_offline_dpo_trains_on_the_pairs_of_the_source(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    tiny_llama(seed=0).save_pretrained(model_dir)
    attempts = [
        _attempt("a1", "A", [1, 10, 11], [7, 7, 7], 1.0),
        _attempt("a2", "A", [1, 10, 11], [20, 21, 22], 0.0),
        _attempt("b1", "B", [1, 12], [7, 7], 1.0),  # alone in its task: no pair
    ]
    context = _Context(
        run=_Run(run_dir=tmp_path / "run", model_path=model_dir), rollouts=_Rollouts(attempts)
    )
    config = DPOAlgorithmConfig(
        steps=3,
        source=StoreSource(store="sqlite:///unused.db"),
        dpo=DPOConfig(learning_rate=1e-2, beta=0.5, lora=LoraSettings(r=4, alpha=8)),
    )
    history = asyncio.run(run_dpo(config, context))  # type: ignore[arg-type]
    assert context.rollouts.reads == 1  # read and paired once
    assert len(history) == 3 and context.progress.step == 3
    assert [m["dpo/pairs"] for m in history] == [1.0, 1.0, 1.0]
    assert history[0]["dpo/groups_single"] == 1.0
    assert history[0]["reward/mean"] == pytest.approx(2 / 3)
    assert history[0]["dpo/margin"] == 0.0  # a fresh adapter is its reference
    assert history[-1]["dpo/margin"] > 0 and history[-1]["dpo/accuracy"] == 1.0
    assert [p.name for p in context.policy.served] == ["step-00001", "step-00002", "step-00003"]
    assert (context.policy.served[-1] / "adapter_model.safetensors").is_file()
