"""Which rollout, attempt and agent the running code belongs to, kept in contextvars.

Every asyncio task and every thread started with ``asyncio.to_thread`` gets its own copy, so
many rollouts run in one process without seeing each other; there is no process-global "active
rollout". ``rollout_scope()`` sets the rollout for a block and opens its root span;
``as_agent()`` (in ``emitters``) sets the agent name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fulmen.tracing import semconv

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

__all__ = [
    "TraceContext",
    "current_agent_name",
    "current_trace",
    "rollout_scope",
    "set_agent_name",
]


@dataclass(frozen=True)
class TraceContext:
    """The rollout and attempt a block of code works for, and the tracer its spans go to."""

    rollout_id: str
    attempt_id: str
    tracer: Tracer


_TRACE: ContextVar[TraceContext | None] = ContextVar("fulmen_trace", default=None)
_AGENT: ContextVar[str | None] = ContextVar("fulmen_agent", default=None)


def current_trace() -> TraceContext | None:
    """Return the rollout scope of the calling code, or ``None`` outside any rollout."""
    return _TRACE.get()


def current_agent_name() -> str | None:
    """Return the agent name set by the innermost ``as_agent``, or ``None``."""
    return _AGENT.get()


@contextmanager
def set_agent_name(name: str | None) -> Iterator[None]:
    """Set the current agent name for a block (the emitters' ``as_agent`` builds on this)."""
    token = _AGENT.set(name)
    try:
        yield
    finally:
        _AGENT.reset(token)


@contextmanager
def rollout_scope(
    tracer: Tracer,
    rollout_id: str,
    attempt_id: str,
    *,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Iterator[Span]:
    """Run a block as attempt ``attempt_id`` of rollout ``rollout_id`` and yield its root span.

    The root span (``fulmen.rollout``) starts a new trace, so the attempt never inherits a parent
    from the caller; every span started inside the block carries the rollout and attempt ids.
    An exception leaving the block is recorded on the root span and re-raised.
    """
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    trace_token = _TRACE.set(TraceContext(rollout_id, attempt_id, tracer))
    agent_token = _AGENT.set(None)
    try:
        root = tracer.start_span(
            semconv.SPAN_ROLLOUT,
            context=otel_context.Context(),
            attributes=dict(attributes or {}),
        )
        with trace.use_span(root, end_on_exit=True, record_exception=True):
            yield root
    finally:
        _AGENT.reset(agent_token)
        _TRACE.reset(trace_token)
