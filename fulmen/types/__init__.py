"""The data model of fulmen: the format of storage and of every HTTP API.

This package imports nothing else from fulmen, so any component may depend on it.
"""

from __future__ import annotations

from fulmen.types._unset import UNSET, Unset, UnsetType
from fulmen.types.prompt import (
    PROMPT_SCORES_KEY,
    Demonstration,
    PromptLineage,
    PromptMessage,
    PromptScore,
)
from fulmen.types.queries import Page, RolloutQuery, StoreStats
from fulmen.types.records import (
    LLMCall,
    LLMCallCreate,
    LLMChoice,
    Span,
    SpanCreate,
    SpanEvent,
    SpanStatus,
    SpanStatusCode,
)
from fulmen.types.resources import LLMResource, PromptTemplate, Resource, Resources, ResourcesCreate
from fulmen.types.rewards import PruneReport, PruneRequest, Reward, RewardCreate
from fulmen.types.rollout import (
    Attempt,
    AttemptStatus,
    Claim,
    Mode,
    Rollout,
    RolloutConfig,
    RolloutCreate,
    RolloutStatus,
    Worker,
)
from fulmen.types.runs import ModelKind, ModelVersion, Run, RunMetrics, RunStatus
from fulmen.types.sessions import SessionCreate
from fulmen.types.transitions import Trajectory, Transition, TransitionDiagnostics

__all__ = [
    "PROMPT_SCORES_KEY",
    "UNSET",
    "TransitionDiagnostics",
    "Attempt",
    "AttemptStatus",
    "Claim",
    "Demonstration",
    "LLMCall",
    "LLMCallCreate",
    "LLMChoice",
    "LLMResource",
    "Mode",
    "ModelKind",
    "ModelVersion",
    "Page",
    "PromptLineage",
    "PromptMessage",
    "PromptScore",
    "PromptTemplate",
    "PruneReport",
    "PruneRequest",
    "Resource",
    "Resources",
    "ResourcesCreate",
    "Reward",
    "RewardCreate",
    "Rollout",
    "RolloutConfig",
    "RolloutCreate",
    "RolloutQuery",
    "RolloutStatus",
    "Run",
    "RunMetrics",
    "RunStatus",
    "SessionCreate",
    "Span",
    "SpanCreate",
    "SpanEvent",
    "SpanStatus",
    "SpanStatusCode",
    "StoreStats",
    "Trajectory",
    "Transition",
    "Unset",
    "UnsetType",
    "Worker",
]
