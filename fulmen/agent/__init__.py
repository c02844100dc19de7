"""The rollout API (``@rollout``, ``Agent``) and the runner that executes it.

``Runner`` and ``RunnerConfig`` load lazily: the runner pulls in OpenTelemetry's SDK, which an
agent module that only decorates its function does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.agent.api import Agent, RolloutFunction, rollout
from fulmen.agent.context import LLM, RolloutContext
from fulmen.importing import lazy_attributes

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


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
