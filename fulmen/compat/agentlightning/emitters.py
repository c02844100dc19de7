"""0.x's emitters (``emit_reward``, ``emit_object``, ``emit_message``, ...) on fulmen's tracing.

Each writes the fulmen span that carries the same meaning into the current rollout (outside a
rollout they log a warning and do nothing, as fulmen's own emitters):

=======================  =====================================================
0.x                      fulmen span
=======================  =====================================================
``emit_reward(x)``       a reward (``dict``: named rewards, ``primary_key``)
``emit_object(o)``       an observation holding ``o`` as JSON
``emit_message(text)``   an observation named ``message``
``emit_annotation(d)``   an observation named ``annotation`` holding ``d``
``emit_exception(e)``    an exception (type, message, traceback)
``operation(...)``       an operation span around a block or each call
``@reward``              a reward: the decorated function's returned number
=======================  =====================================================

0.x returned the span it created and could skip sending it (``propagate=False``); fulmen's
emitters send and return nothing, so ``propagate=False`` is refused.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.tracing import emitters
from fulmen.tracing.emitters import SpanScope, emit_observation

__all__ = [
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_observation",
    "emit_reward",
    "operation",
    "reward",
]

F = TypeVar("F", bound=Callable[..., Any])


def _sent(propagate: bool, name: str) -> None:
    if not propagate:
        raise NotSupported(
            f"{name}(propagate=False)",
            why="fulmen's emitters send the span at once and return nothing to send later",
            instead=f"call {name} where the span should be recorded",
        )


def _flat(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {str(k): v for k, v in (attributes or {}).items()}


def emit_reward(
    reward: float | Mapping[str, float],
    *,
    primary_key: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    propagate: bool = True,
) -> None:
    """Record a reward (a number, or named numbers with ``primary_key`` the one trained on)."""
    _sent(propagate, "emit_reward")
    emitters.emit_reward(reward, primary=primary_key, attributes=_flat(attributes))


def emit_object(
    object: Any, attributes: Mapping[str, Any] | None = None, propagate: bool = True
) -> None:
    """Record an object (stored as JSON) as an observation of the rollout."""
    _sent(propagate, "emit_object")
    # Always JSON (a string too), so agl.get_object_value reads back what was given.
    text = json.dumps(object, default=str)
    emit_observation(text, name="object", attributes=_flat(attributes))


def emit_message(
    message: str, attributes: Mapping[str, Any] | None = None, propagate: bool = True
) -> None:
    """Record a text message (a log line of the agent) as an observation named ``message``."""
    _sent(propagate, "emit_message")
    emit_observation(message, name="message", attributes=_flat(attributes))


def emit_annotation(annotation: Mapping[str, Any], propagate: bool = True) -> None:
    """Record key-value annotations as an observation named ``annotation``."""
    _sent(propagate, "emit_annotation")
    emit_observation(dict(annotation), name="annotation")


def emit_exception(exception: BaseException, propagate: bool = True) -> None:
    """Record an exception (type, message, traceback) without raising it."""
    _sent(propagate, "emit_exception")
    emitters.emit_exception(exception)


def operation(
    fn: Callable[..., Any] | None = None,
    *,
    propagate: bool = True,
    name: str | None = None,
    **additional_attributes: Any,
) -> Any:
    """Open a span around a block (as a context manager) or around each call (as a decorator)."""
    _sent(propagate, "operation")
    scope: SpanScope = emitters.operation(name or "operation", **additional_attributes)
    return scope if fn is None else scope(fn)


def reward(fn: F) -> F:
    """Decorate a function whose returned number is the rollout's reward (0.x's ``@reward``).

    A result that is not a number is returned unchanged and recorded as no reward.
    """

    def record(result: Any) -> Any:
        if isinstance(result, int | float) and not isinstance(result, bool):
            emitters.emit_reward(float(result))
        return result

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return record(await fn(*args, **kwargs))

        return cast("F", async_wrapper)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return record(fn(*args, **kwargs))

    return cast("F", wrapper)
