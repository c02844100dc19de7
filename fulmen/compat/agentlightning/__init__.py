"""Agent Lightning 0.x's public names on fulmen: ``import fulmen.compat.agentlightning as agl``.

One changed import line moves a 0.x agent or training script to fulmen. The agent side
(``LitAgent``, ``@rollout``, resources, emitters) runs under ``fulmen train`` or
``agl.Trainer``; the algorithm names map onto fulmen's (``APO`` → ``apo``, ``VERL`` →
``grpo`` with a key-by-key report); ``LightningStore`` keeps the store calls of custom
algorithms. Where fulmen cannot do what 0.x did, ``NotSupported`` says what to change:
``docs/migrate-from-agent-lightning.md`` lists every name.
"""

from __future__ import annotations

from fulmen.compat.agentlightning.adapters import (
    LlmProxyTraceToTriplet,
    TraceAdapter,
    TracerTraceToTriplet,
    TraceToMessages,
)
from fulmen.compat.agentlightning.algorithms import APO, VERL, Algorithm, Baseline
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
from fulmen.compat.agentlightning.litagent import LitAgent
from fulmen.compat.agentlightning.logs import configure_logger
from fulmen.compat.agentlightning.resources import (
    LLM,
    NamedResources,
    PromptTemplate,
    ProxyLLM,
    ResourcesUpdate,
    ResourceUnion,
)
from fulmen.compat.agentlightning.spans import (
    Span,
    find_final_reward,
    find_reward_spans,
    get_reward_value,
    is_reward_span,
)
from fulmen.compat.agentlightning.store import InMemoryLightningStore, LightningStore
from fulmen.compat.agentlightning.trainer import Trainer
from fulmen.compat.agentlightning.types import (
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
from fulmen.compat.agentlightning.verl import VerlTranslation, translate_verl_config

# 0.x names fulmen has no counterpart for: reaching one raises NotSupported saying what to use.
_REFUSED: dict[str, tuple[str, str]] = {
    "AgentOpsTracer": ("fulmen traces every rollout itself", "the agl.emit_* functions"),
    "OtelTracer": ("fulmen traces every rollout itself", "the agl.emit_* functions"),
    "Tracer": ("fulmen traces every rollout itself", "the agl.emit_* functions"),
    "LitAgentRunner": ("fulmen's runner runs agents", "fulmen train / agl.Trainer.dev"),
    "Runner": ("fulmen's runner runs agents", "fulmen train / agl.Trainer.dev"),
    "LLMProxy": ("fulmen's gateway records every call", "the llm resource's URL"),
    "ExecutionStrategy": ("fulmen starts its parts itself", "store_url + fulmen runner"),
    "ClientServerExecutionStrategy": ("fulmen starts its parts itself", "fulmen runner"),
    "SharedMemoryExecutionStrategy": ("fulmen starts its parts itself", "fulmen train"),
    "AgentLightningClient": ("0.x's legacy HTTP client", "agl.LightningStore.open(url)"),
    "AgentLightningServer": ("0.x's legacy HTTP server", "fulmen store serve"),
    "DevTaskLoader": ("0.x's legacy dev loader", "agl.Trainer.dev"),
    "LightningStoreServer": ("fulmen serves its store itself", "fulmen store serve"),
    "LightningStoreClient": ("stores are opened by URL", "agl.LightningStore.open(url)"),
    "LightningStoreThreaded": ("fulmen's stores are safe to share", "agl.LightningStore"),
    "FastAlgorithm": ("0.x algorithm classes drive 0.x's runners", "agl.APO / agl.VERL"),
    "algo": ("0.x algorithm classes drive 0.x's runners", "agl.APO / agl.VERL"),
    "Hook": ("fulmen's runner calls no hooks", "code in the rollout method"),
}


def __getattr__(name: str) -> object:
    refused = _REFUSED.get(name)
    if refused is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise NotSupported(f"agl.{name}", why=refused[0], instead=refused[1])


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
    "configure_logger",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_observation",
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "get_reward_value",
    "is_reward_span",
    "llm_rollout",
    "operation",
    "prompt_rollout",
    "reward",
    "rollout",
    "translate_verl_config",
]
