"""The OpenTelemetry provider a runner owns, and the processor that tags spans with the rollout.

``create_provider(exporter)`` builds a fresh SDK ``TracerProvider``; fulmen never installs it as
OpenTelemetry's global provider, so two runners (or a runner and the host application's own
tracing) in one process do not mix. Every span started under the provider while a
``rollout_scope`` is active is stamped with the rollout id, attempt id and current agent name,
which is how the exporter knows where a span belongs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Tracer

from fulmen.tracing import semconv
from fulmen.tracing.context import current_agent_name, current_trace

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

__all__ = ["RolloutSpanProcessor", "create_provider", "provider_tracer"]

_INSTRUMENTATION_NAME = "fulmen"


logger = logging.getLogger(__name__)


class RolloutSpanProcessor(SpanProcessor):
    """Stamps rollout/attempt/agent attributes on start and hands ended spans to an exporter.

    Unlike OTel's batch processor it starts no thread: the exporter is expected to queue and
    return at once (``StoreSpanExporter`` does).
    """

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Tag ``span`` with the rollout scope and agent name of the code that started it."""
        del parent_context
        scope = current_trace()
        if scope is None:
            return
        span.set_attribute(semconv.ROLLOUT_ID, scope.rollout_id)
        span.set_attribute(semconv.ATTEMPT_ID, scope.attempt_id)
        agent = current_agent_name()
        if agent is not None and not (span.attributes or {}).get(semconv.AGENT_NAME):
            span.set_attribute(semconv.AGENT_NAME, agent)

    def on_end(self, span: ReadableSpan) -> None:
        """Pass the ended span to the exporter."""
        self._exporter.export((span,))

    def shutdown(self) -> None:
        """Shut the exporter down."""
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Forward to the exporter."""
        return self._exporter.force_flush(timeout_millis)


def create_provider(
    exporter: SpanExporter, *, resource_attributes: Mapping[str, str] | None = None
) -> TracerProvider:
    """Create an SDK ``TracerProvider`` sending rollout spans to ``exporter``; never global.

    Args:
        exporter: where ended spans go (a ``StoreSpanExporter`` in a runner).
        resource_attributes: OTel resource attributes, e.g. ``{"service.name": "my-agent"}``.
    """
    attributes = {"service.name": "fulmen-runner", **(resource_attributes or {})}
    # Instrumentations write a call's messages as one attribute per field (OpenInference:
    # llm.input_messages.N.message.content, ...), so a long agent conversation passes OTel's
    # default of 128 attributes per span, beyond which the SDK drops the *oldest* ones: the
    # rollout and attempt ids stamped at start, and the span then belongs to no rollout. The
    # attributes are the call's own messages, already in memory, so no count limit applies.
    limits = SpanLimits(max_span_attributes=SpanLimits.UNSET)
    provider = TracerProvider(resource=Resource.create(attributes), span_limits=limits)
    # OTEL_SDK_DISABLED=true (set by users, or by frameworks such as CrewAI's setup) turns the
    # SDK into no-ops. It is meant for telemetry export; for fulmen, spans carry the rewards, so
    # the runner's own provider must stay on whatever that variable says.
    if getattr(provider, "_disabled", False):
        logger.info("OTEL_SDK_DISABLED is set; fulmen's rollout spans are recorded anyway")
        provider._disabled = False  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
    provider.add_span_processor(RolloutSpanProcessor(exporter))
    return provider


def provider_tracer(provider: TracerProvider) -> Tracer:
    """Return the tracer fulmen's emitters use on ``provider``."""
    return provider.get_tracer(_INSTRUMENTATION_NAME)
