"""fulmen: train any LLM agent from its own runs.

Public names are imported lazily so that ``import fulmen`` stays fast: the store backends,
HTTP stacks, OpenTelemetry and torch load only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.importing import lazy_attributes
from fulmen.version import __version__

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

__all__ = [
    "Agent",
    "LLM",
    "RolloutContext",
    "Runner",
    "RunnerConfig",
    "TrainConfig",
    "Trainer",
    "__version__",
    "as_agent",
    "emit_exception",
    "emit_message",
    "emit_observation",
    "emit_reward",
    "load_config",
    "open_store",
    "operation",
    "rollout",
]

if TYPE_CHECKING:  # the lazy names, for type checkers and IDEs
    from fulmen.agent.api import Agent as Agent
    from fulmen.agent.api import rollout as rollout
    from fulmen.agent.config import RunnerConfig as RunnerConfig
    from fulmen.agent.context import LLM as LLM
    from fulmen.agent.context import RolloutContext as RolloutContext
    from fulmen.agent.runner import Runner as Runner
    from fulmen.store import open_store as open_store
    from fulmen.tracing.emitters import as_agent as as_agent
    from fulmen.tracing.emitters import emit_exception as emit_exception
    from fulmen.tracing.emitters import emit_message as emit_message
    from fulmen.tracing.emitters import emit_observation as emit_observation
    from fulmen.tracing.emitters import emit_reward as emit_reward
    from fulmen.tracing.emitters import operation as operation
    from fulmen.trainer.config import TrainConfig as TrainConfig
    from fulmen.trainer.config import load_config as load_config
    from fulmen.trainer.trainer import Trainer as Trainer


__getattr__ = lazy_attributes(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return list(__all__)
