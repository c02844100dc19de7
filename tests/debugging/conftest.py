"""Shared parts of the debugging tests: the ``tiny`` engine and a store of real toy rollouts.

The engine starts once per session (about 10 s here). ``recorded`` runs the toy example's
agents through the normal path (SQLite store, gateway on 127.0.0.1, runner) against it, in
train mode at temperature 1.0, so the recorded replies are samples that a fresh run would not
repeat: only a replay that serves the recording gets the same rewards.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fulmen.agent.rollouts import RolloutSettings
from fulmen.engines.config import EngineConfig
from fulmen.trainer.stack import TrainingStack
from fulmen.types import LLMResource, Mode, ResourcesCreate, RolloutConfig, RolloutCreate
from tests.prefork import python

TOY_DIR = Path(__file__).resolve().parents[2] / "examples" / "toy"
SAMPLING = {"default": {"temperature": 0.0, "max_tokens": 8},
            "train": {"temperature": 1.0, "max_tokens": 8}}  # fmt: skip
SETTINGS = RolloutSettings(concurrency=8, timeout_s=60, max_attempts=1)


@pytest.fixture(scope="session")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("torch")
    pytest.importorskip("openai")
    from fulmen.engines.launcher import BuiltinLauncher
    from fulmen.engines.models import resolve_model

    log = tmp_path_factory.mktemp("engine") / "engine.log"
    launcher = BuiltinLauncher(
        str(resolve_model("tiny")),
        max_batch=8,
        max_lora_rank=8,
        log_path=log,
        extra_args=["--served-model-name", "tiny"],
        python=python(),
    )
    launcher.start()
    try:
        yield str(launcher.base_url)
    finally:
        launcher.stop()


@pytest.fixture
def toy_imports() -> Iterator[None]:
    """Put examples/toy on ``sys.path`` and forget its ``agent`` module afterwards."""
    path, modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(TOY_DIR))
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if name == "agent":
            del sys.modules[name]


@dataclass(frozen=True)
class Recorded:
    """A SQLite store holding finished toy rollouts; ``ids[agent]`` lists each agent's."""

    url: str
    ids: dict[str, list[str]]


async def run_rollouts(
    url: str,
    engine_url: str,
    agent: str,
    tasks: list[dict[str, Any]],
    *,
    prefix: str,
    expect: str = "succeeded",
) -> list[str]:
    """Run ``agent`` once per task, in train mode, through a real stack; return the ids.

    Every rollout must end ``expect`` (``succeeded`` unless a test records failures).
    """
    stack = TrainingStack(
        store_url=url,
        agent=agent,
        model="tiny",
        engine=EngineConfig(kind="endpoint", url=engine_url),
        rollouts=SETTINGS,
        log_dir=Path("."),
    )
    async with stack:
        llm = LLMResource(base_url=engine_url, model="tiny", sampling=SAMPLING)
        version = (await stack.store.add_resources(ResourcesCreate(resources={"llm": llm}))).version
        creates = [
            RolloutCreate(
                input=task,
                mode=Mode.TRAIN,
                task_id=task["id"],
                rollout_id=f"{prefix}-{task['id']}",
                resources_version=version,
                config=RolloutConfig(timeout_s=60),
            )
            for task in tasks
        ]
        ids = [c.rollout_id for c in creates if c.rollout_id is not None]
        await stack.store.enqueue(creates)
        done: list[Any] = []
        for _ in range(24):  # two minutes at most
            done = await stack.store.wait_for_rollouts(ids, timeout=5.0)
            stack.check_runner()
            if len(done) == len(ids):
                break
        assert [r.status.value for r in done] == [expect] * len(ids), [r.error for r in done]
        return ids
