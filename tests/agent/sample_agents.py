"""Agents the runner tests run, importable by worker processes and runner subprocesses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fulmen.agent.api import Agent, rollout
from fulmen.tracing.emitters import as_agent, emit_observation, emit_reward, operation


@rollout
def sync_reward(task: Any, llm: Any, context: Any) -> dict[str, float]:
    """Emits spans from a worker process and returns two rewards."""
    with as_agent("solver"), operation("solve"):
        emit_observation({"base_url": llm.base_url, "pid": os.getpid()})
    emit_reward({"format": 0.5}, primary="format")
    return {"reward": float(task["x"]), "attempt": float(context.attempt.number)}


@rollout
def sync_raise(task: Any) -> None:
    """Always raises; the traceback must reach the store."""
    raise ValueError(f"boom-{task['x']}")


@rollout
def sync_hang(task: Any) -> float:
    """Starts a grandchild process, records both pids, then hangs (until killed)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(task["pid_file"]).write_text(f"{os.getpid()} {child.pid}")
    time.sleep(600)
    return 1.0


@rollout
async def async_slow_once(task: Any, context: Any) -> float:
    """On its first attempt writes a marker and sleeps long; later attempts finish fast."""
    if context.attempt.number == 1:
        Path(task["marker"]).write_text(context.attempt_id)
        await asyncio.sleep(task.get("sleep", 600))
    emit_reward({"steps": 1.0}, primary="steps")
    return 1.0


@rollout
async def async_sleepy(task: Any) -> float:
    """Sleeps a little per rollout (for the store-restart test) and returns its x."""
    with operation("work"):
        await asyncio.sleep(task.get("sleep", 0.2))
    return float(task["x"])


class TwoModes(Agent):
    """Needs setup; returns a different reward in training and validation."""

    def setup(self) -> None:
        self.offset = 10.0

    def training_rollout(self, task: Any) -> float:
        return self.offset + task["x"]

    def validation_rollout(self, task: Any) -> float:
        return -(self.offset + task["x"])


two_modes = TwoModes()


@rollout
def sync_slow_once(task: Any, context: Any) -> float:
    """Like ``async_slow_once`` but sync (runs in a worker process); the marker holds its pid."""
    if context.attempt.number == 1:
        Path(task["marker"]).write_text(str(os.getpid()))
        time.sleep(task.get("sleep", 600))
    emit_reward({"steps": 1.0}, primary="steps")
    return 1.0
