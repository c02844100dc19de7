"""fulmen: train any LLM agent from its own runs.

Public names are imported lazily so that ``import fulmen`` stays fast: the store backends,
HTTP stacks, OpenTelemetry and torch load only when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name → module that defines it
_LAZY: dict[str, str] = {
    "Agent": "fulmen.agent.api",
    "LLM": "fulmen.agent.context",
    "RolloutContext": "fulmen.agent.context",
    "Runner": "fulmen.agent.runner",
    "RunnerConfig": "fulmen.agent.config",
    "TrainConfig": "fulmen.trainer.config",
    "Trainer": "fulmen.trainer.trainer",
    "as_agent": "fulmen.tracing.emitters",
    "emit_exception": "fulmen.tracing.emitters",
    "emit_message": "fulmen.tracing.emitters",
    "emit_observation": "fulmen.tracing.emitters",
    "emit_reward": "fulmen.tracing.emitters",
    "load_config": "fulmen.trainer.config",
    "open_store": "fulmen.store",
    "operation": "fulmen.tracing.emitters",
    "rollout": "fulmen.agent.api",
}

__all__ = sorted(["__version__", *_LAZY])

if TYPE_CHECKING:
    from fulmen.agent.api import Agent, rollout
    from fulmen.agent.config import RunnerConfig
    from fulmen.agent.context import LLM, RolloutContext
    from fulmen.agent.runner import Runner
    from fulmen.store import open_store
    from fulmen.trainer.config import TrainConfig, load_config
    from fulmen.trainer.trainer import Trainer
    from fulmen.tracing.emitters import (
        as_agent,
        emit_exception,
        emit_message,
        emit_observation,
        emit_reward,
        operation,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fulmen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
