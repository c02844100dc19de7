"""What agent code calls to add meaning to a rollout: rewards, observations, agents, operations.

Every emitter writes an OpenTelemetry span through the tracer of the current ``rollout_scope``
(a contextvar, so concurrent rollouts never see each other's). Outside a rollout the emitters
log a warning and do nothing, so agent code also runs unchanged without a runner.

>>> from fulmen.tracing.emitters import as_agent, operation
>>> with as_agent("planner"), operation("plan") as span:
...     span.is_recording()  # no rollout scope here: spans are no-ops
False
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import traceback
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fulmen.errors import ConfigError
from fulmen.tracing import semconv
from fulmen.tracing.context import current_trace, set_agent_name

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from opentelemetry.util.types import AttributeValue
    from pydantic import JsonValue

__all__ = [
    "SpanScope",
    "as_agent",
    "emit_exception",
    "emit_message",
    "emit_observation",
    "emit_reward",
    "normalize_rewards",
    "operation",
]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
Attributes = Mapping[str, "AttributeValue"]


def normalize_rewards(
    value: float | Mapping[str, float], primary: str | None = None
) -> tuple[dict[str, float], str]:
    """Check a reward (a number or a dict of named numbers) and pick its primary name.

    A single number is named ``reward``. Without ``primary``, a dict's ``reward`` entry is
    primary, or else its first entry. Raises ``ConfigError`` naming a bad value.
    """
    if isinstance(value, Mapping):
        rewards = {str(k): _finite(v, name=str(k)) for k, v in value.items()}
        if not rewards:
            raise ConfigError("emit_reward got an empty dict of rewards")
    else:
        rewards = {semconv.DEFAULT_REWARD_NAME: _finite(value, name=semconv.DEFAULT_REWARD_NAME)}
    if primary is None:
        is_default = semconv.DEFAULT_REWARD_NAME in rewards
        primary = semconv.DEFAULT_REWARD_NAME if is_default else next(iter(rewards))
    if primary not in rewards:
        raise ConfigError(f"primary reward {primary!r} is not among {sorted(rewards)}")
    return rewards, primary


def _finite(value: object, *, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"reward {name!r} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"reward {name!r} must be finite, got {value!r}")
    return float(value)


def _emit(name: str, attributes: dict[str, AttributeValue]) -> bool:
    scope = current_trace()
    if scope is None:
        logger.warning("%s emitted outside a rollout; ignored", name)
        return False
    scope.tracer.start_span(name, attributes=attributes).end()
    return True


def emit_reward(
    value: float | Mapping[str, float],
    *,
    primary: str | None = None,
    response_id: str | None = None,
    attributes: Attributes | None = None,
    source: str = "emit",
) -> None:
    """Record a reward (a number, or a dict of named numbers) for the current rollout.

    Args:
        value: the reward, or several named rewards (e.g. ``{"correct": 1, "format": 0.5}``).
        primary: which named reward the trainer optimises; see ``normalize_rewards``.
        response_id: the ``id`` of the LLM response this reward is for (a per-call reward);
            transition building joins it to the gateway's record of that call.
        attributes: extra span attributes.
        source: who emitted it; the runner passes ``"return"`` for a function's return value.
    """
    rewards, primary = normalize_rewards(value, primary)
    extra: dict[str, AttributeValue] = {semconv.RESPONSE_ID: response_id} if response_id else {}
    _emit(
        semconv.SPAN_REWARD,
        {
            **(attributes or {}),
            **extra,
            semconv.REWARD_NAMES: list(rewards),
            semconv.REWARD_VALUES: list(rewards.values()),
            semconv.REWARD_PRIMARY: primary,
            semconv.REWARD_SOURCE: source,
        },
    )


def emit_observation(
    content: JsonValue, *, name: str | None = None, attributes: Attributes | None = None
) -> None:
    """Record something the agent observed (a tool result, an environment state).

    Non-string content is stored as JSON.
    """
    text = content if isinstance(content, str) else json.dumps(content, default=str)
    attrs: dict[str, AttributeValue] = {**(attributes or {}), semconv.OBSERVATION_CONTENT: text}
    if name is not None:
        attrs[semconv.OPERATION_NAME] = name
    _emit(semconv.SPAN_OBSERVATION, attrs)


def emit_message(role: str, content: str, *, attributes: Attributes | None = None) -> None:
    """Record a chat message (``role`` such as ``user``/``assistant``/``tool``) in the rollout."""
    _emit(
        semconv.SPAN_MESSAGE,
        {**(attributes or {}), semconv.MESSAGE_ROLE: role, semconv.MESSAGE_CONTENT: content},
    )


def emit_exception(exc: BaseException, *, attributes: Attributes | None = None) -> None:
    """Record an exception (type, message, traceback) without raising it."""
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    _emit(
        semconv.SPAN_EXCEPTION,
        {
            **(attributes or {}),
            semconv.EXCEPTION_TYPE: type(exc).__qualname__,
            semconv.EXCEPTION_MESSAGE: str(exc),
            semconv.EXCEPTION_STACKTRACE: stack,
        },
    )


class SpanScope:
    """A span that is a context manager (``with``/``async with``) and a decorator.

    As a decorator it opens a fresh span per call, for sync and async functions alike. One
    object must not be entered twice at the same time; create one per ``with``.
    """

    def __init__(
        self, name: str, attributes: Attributes | None = None, agent_name: str | None = None
    ) -> None:
        self._name = name
        self._attributes = dict(attributes or {})
        self._agent_name = agent_name
        self._exits: ExitStack | None = None

    def _fresh(self) -> SpanScope:
        return SpanScope(self._name, self._attributes, self._agent_name)

    def __enter__(self) -> Span:
        from opentelemetry.trace import INVALID_SPAN

        if self._exits is not None:
            raise RuntimeError(f"span scope {self._name!r} is already entered")
        exits = ExitStack()
        if self._agent_name is not None:  # before the span starts, so it is stamped
            exits.enter_context(set_agent_name(self._agent_name))
        scope = current_trace()
        span: Span = INVALID_SPAN
        if scope is not None:
            span = exits.enter_context(
                scope.tracer.start_as_current_span(self._name, attributes=self._attributes)
            )
        self._exits = exits
        return span

    def __exit__(self, *exc_info: Any) -> bool:
        exits, self._exits = self._exits, None
        if exits is None:
            return False
        return bool(exits.__exit__(*exc_info))

    async def __aenter__(self) -> Span:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> bool:
        return self.__exit__(*exc_info)

    def __call__(self, fn: F) -> F:
        """Wrap ``fn`` so every call runs inside a fresh copy of this scope."""
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self._fresh():
                    return await fn(*args, **kwargs)

            return cast("F", async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return fn(*args, **kwargs)

        return cast("F", wrapper)


def operation(name: str = semconv.SPAN_OPERATION, **attributes: AttributeValue) -> SpanScope:
    """Open a span around a block or each call of a function.

    Use ``with operation("search", query=q): ...`` or ``@operation("search")``.

    Exceptions leaving it are recorded on the span and re-raised.
    """
    return SpanScope(name, {semconv.OPERATION_NAME: name, **attributes})


def as_agent(name: str, **attributes: AttributeValue) -> SpanScope:
    """Mark the code inside as acting for agent ``name`` (a role, a graph node).

    Every span started inside, including framework spans and gateway-joined LLM calls, carries
    ``gen_ai.agent.name = name``, and every LLM call sent to the rollout's gateway URL carries
    it in the ``x-fulmen-agent`` header (no instrumentation needed); usable as
    ``with``/``async with`` or as a decorator.
    """
    if not name:
        raise ConfigError("as_agent needs a non-empty agent name")
    return SpanScope(semconv.SPAN_AGENT, {semconv.AGENT_NAME: name, **attributes}, name)
