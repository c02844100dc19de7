"""``engine.dtype``, ``engine.prefix_cache`` and ``engine.threads`` reach the built-in engine
the trainer starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

import fulmen
from fulmen.agent.rollouts import RolloutSettings
from fulmen.engines.config import EngineConfig
from fulmen.trainer.stack import TrainingStack


@fulmen.rollout
async def idle_agent(task: dict[str, object]) -> float:
    return 0.0


async def _engine_gauges(engine: EngineConfig, log_dir: Path) -> dict[str, float]:
    stack = TrainingStack(
        store_url="memory://",
        agent=idle_agent,
        model="tiny",
        engine=engine,
        rollouts=RolloutSettings(concurrency=1),
        log_dir=log_dir,
    )
    async with stack:
        assert stack.engine is not None
        root = stack.engine_url.removesuffix("/v1")
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"{root}/metrics", timeout=30)).text
    gauges: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split(" ")
            gauges[name] = float(value)
    return gauges


@pytest.mark.parametrize(
    ("engine", "bfloat16", "prefix_cache", "threads"),
    [
        (EngineConfig(), 0, 1, 1),
        (EngineConfig(dtype="bfloat16", prefix_cache=False, threads=2), 1, 0, 2),
    ],
)
def test_the_trainers_engine_runs_with_the_configured_precision_and_cache(
    tmp_path: Path, engine: EngineConfig, bfloat16: int, prefix_cache: int, threads: int
) -> None:
    pytest.importorskip("torch")
    gauges = asyncio.run(_engine_gauges(engine, tmp_path))
    assert gauges["fulmen_engine_bfloat16"] == bfloat16
    assert gauges["fulmen_engine_prefix_cache_enabled"] == prefix_cache
    assert gauges["fulmen_engine_threads"] == threads
