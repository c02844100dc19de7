"""Agent Lightning 0.x's public names on fulmen: ``import fulmen.compat.agentlightning as agl``.

One changed import line moves a 0.x agent or training script to fulmen. The agent side
(``LitAgent``, ``@rollout``, resources, emitters) runs under ``fulmen train`` or
``agl.Trainer``; the algorithm names map onto fulmen's (``APO`` → ``apo``, ``VERL`` →
``grpo`` with a key-by-key report); an ``Algorithm`` of one's own has its ``run()`` driven
against ``LightningStore``, the store facade. Every 0.x module path and name resolves
(``namespace``): working, or ``NotSupported`` saying what to write instead;
``docs/migrate-from-agent-lightning.md`` lists them.
"""

from __future__ import annotations

import sys

from fulmen.compat.agentlightning import namespace
from fulmen.compat.agentlightning.adapters import (
    LlmProxyTraceToTriplet,
    TraceAdapter,
    TracerTraceToTriplet,
    TraceToMessages,
)
from fulmen.compat.agentlightning.algorithm_base import Algorithm, FastAlgorithm, algo
from fulmen.compat.agentlightning.algorithms import APO, VERL, Baseline
from fulmen.compat.agentlightning.decorators import (
    FunctionalLitAgent,
    llm_rollout,
    prompt_rollout,
    rollout,
)
from fulmen.compat.agentlightning.emitters import (
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_observation,
    emit_reward,
    operation,
    reward,
)
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.lit_agent import LitAgent
from fulmen.compat.agentlightning.logs import configure_logger
from fulmen.compat.agentlightning.logs import setup as setup_logging
from fulmen.compat.agentlightning.logs import setup_module as setup_module_logging
from fulmen.compat.agentlightning.memory_store import InMemoryLightningStore
from fulmen.compat.agentlightning.resources import (
    LLM,
    NamedResources,
    PromptTemplate,
    ProxyLLM,
    ResourcesUpdate,
    ResourceUnion,
)
from fulmen.compat.agentlightning.rollouts import (
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    Dataset,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutRawResult,
    RolloutStatus,
    TaskInput,
)
from fulmen.compat.agentlightning.spans import (
    Span,
    find_final_reward,
    find_reward_spans,
    get_message_value,
    get_object_value,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
)
from fulmen.compat.agentlightning.store_facade import LightningStore
from fulmen.compat.agentlightning.trainer_facade import Trainer
from fulmen.compat.agentlightning.verl_config import translate_verl_config
from fulmen.compat.agentlightning.verl_report import VerlTranslation

__version__ = "0.3.0"  # the 0.x API this layer follows

# The 0.x module paths (``agentlightning.algorithm.apo``, ...) under this package.
namespace.install(sys.modules[__name__])


def __getattr__(name: str) -> object:
    """Resolve the other 0.x names: working ones lazily, refused ones with NotSupported."""
    return namespace.resolve("", name)


__all__ = [
    "APO",
    "LLM",
    "VERL",
    "Algorithm",
    "Attempt",
    "AttemptStatus",
    "AttemptedRollout",
    "Baseline",
    "Dataset",
    "FastAlgorithm",
    "FunctionalLitAgent",
    "InMemoryLightningStore",
    "LightningStore",
    "LitAgent",
    "LlmProxyTraceToTriplet",
    "NamedResources",
    "NotSupported",
    "PromptTemplate",
    "ProxyLLM",
    "ResourceUnion",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "RolloutMode",
    "RolloutRawResult",
    "RolloutStatus",
    "Span",
    "TaskInput",
    "TraceAdapter",
    "TraceToMessages",
    "Trainer",
    "TracerTraceToTriplet",
    "VerlTranslation",
    "algo",
    "configure_logger",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_observation",
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "llm_rollout",
    "operation",
    "prompt_rollout",
    "reward",
    "rollout",
    "setup_logging",
    "setup_module_logging",
    "translate_verl_config",
]
