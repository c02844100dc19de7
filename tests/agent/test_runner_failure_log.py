"""A runner whose agent fails every rollout the same way logs it once, not once per rollout.

Before: one ``attempt ... failed`` line per rollout (a broken agent under ``fulmen train``
printed a line for every rollout of every step). The agent runs in the real runner against a
real in-process store.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from fulmen.agent.api import rollout
from fulmen.agent.runner import Runner
from fulmen.store import Store
from fulmen.types import RolloutConfig, RolloutCreate, RolloutStatus
from tests.agent.conftest import FAST


async def test_the_same_failure_is_logged_once_and_a_new_one_at_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = [{"x": i, "kind": "missing" if i < 6 else "other"} for i in range(8)]
    created = await store.enqueue(
        [RolloutCreate(input=t, config=RolloutConfig(max_attempts=1)) for t in tasks]
    )

    @rollout
    async def broken(task: Any, llm: Any) -> float:
        if task["kind"] == "missing":
            return float(task["expected"])
        raise ValueError("a different mistake")

    caplog.set_level(logging.DEBUG, logger="fulmen.agent.runner")
    await Runner(store, broken, concurrency=1, **FAST).run(until_idle=True)

    for made in created:
        assert (await store.get_rollout(made.rollout_id)).status is RolloutStatus.FAILED
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    failed = [line for line in lines if " failed: " in line]
    assert [line.split(" failed: ", 1)[1] for line in failed] == [
        "KeyError: 'expected'",
        "ValueError: a different mistake",
    ]
    repeats = [r for r in caplog.records if r.levelno == logging.DEBUG and " failed: " in r.message]
    assert len(repeats) == 5 + 1  # each repeat still reaches the debug log
