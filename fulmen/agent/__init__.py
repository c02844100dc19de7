"""The rollout API (``@rollout``, ``Agent``) and the runner that executes it.

``Runner`` and ``RunnerConfig`` load lazily: the runner pulls in OpenTelemetry's SDK, which an
agent module that only decorates its function does not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fulmen.agent.api import Agent, RolloutFunction, rollout
from fulmen.agent.context import LLM, RolloutContext

if TYPE_CHECKING:
    from fulmen.agent.config import RunnerConfig
    from fulmen.agent.runner import Runner, RunnerStats

__all__ = [
    "LLM",
    "Agent",
    "RolloutContext",
    "RolloutFunction",
    "Runner",
    "RunnerConfig",
    "RunnerStats",
    "rollout",
]

_LAZY = {
    "Runner": "fulmen.agent.runner",
    "RunnerStats": "fulmen.agent.runner",
    "RunnerConfig": "fulmen.agent.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fulmen.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
