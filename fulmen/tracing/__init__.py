"""Tracing: per-rollout context, emitters, and the batching export of spans to the store.

Importing this package does not import OpenTelemetry; ``fulmen.tracing.provider`` and
``fulmen.tracing.exporter`` do, and only the runner needs them.
"""

from __future__ import annotations

from fulmen.tracing.context import TraceContext, current_agent_name, current_trace, rollout_scope
from fulmen.tracing.emitters import (
    as_agent,
    emit_exception,
    emit_message,
    emit_observation,
    emit_reward,
    operation,
)
from fulmen.tracing.instrumentation import instrument, uninstrument
from fulmen.tracing.semconv import (
    RewardEvent,
    agent_names_by_response_id,
    primary_reward,
    reward_events,
    rewards_from_spans,
)

__all__ = [
    "RewardEvent",
    "TraceContext",
    "agent_names_by_response_id",
    "as_agent",
    "current_agent_name",
    "current_trace",
    "emit_exception",
    "emit_message",
    "emit_observation",
    "emit_reward",
    "instrument",
    "operation",
    "primary_reward",
    "reward_events",
    "rewards_from_spans",
    "rollout_scope",
    "uninstrument",
]
