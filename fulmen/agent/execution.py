"""Running one attempt of a rollout target inside its rollout scope (shared by every mode).

The same two functions run an agent in the runner's event loop, in a worker thread and in a
worker process: they open the rollout scope (root span + contextvars), bind the arguments by
parameter name, call the agent, check its result and emit a returned reward as a reward span.
Exceptions propagate to the caller, which reports the attempt.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fulmen.agent.api import RolloutResult, RolloutTarget, bind_arguments, check_result
from fulmen.tracing.context import rollout_scope
from fulmen.tracing.emitters import emit_reward

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from fulmen.agent.context import RolloutContext

__all__ = ["run_async", "run_sync"]


def _scope_attributes(context: RolloutContext) -> dict[str, Any]:
    return {
        "fulmen.rollout.mode": context.mode.value,
        "fulmen.attempt.number": context.attempt.number,
        "fulmen.worker.id": context.attempt.worker_id,
    }


def _finish(value: Any) -> RolloutResult:
    result = check_result(value)
    if result is not None:
        emit_reward(result, source="return")
    return result


def run_sync(target: RolloutTarget, context: RolloutContext, tracer: Tracer) -> RolloutResult:
    """Run a sync rollout function to completion in the calling thread."""
    fn = target.function_for(context.mode)
    with rollout_scope(
        tracer, context.rollout_id, context.attempt_id, attributes=_scope_attributes(context)
    ):
        args, kwargs = bind_arguments(fn, context)
        return _finish(fn(*args, **kwargs))


async def run_async(
    target: RolloutTarget, context: RolloutContext, tracer: Tracer
) -> RolloutResult:
    """Run an async rollout function; cancelling the awaiting task cancels the agent."""
    from opentelemetry.trace import Status, StatusCode

    fn = target.function_for(context.mode)
    with rollout_scope(
        tracer, context.rollout_id, context.attempt_id, attributes=_scope_attributes(context)
    ) as root:
        try:
            args, kwargs = bind_arguments(fn, context)
            return _finish(await fn(*args, **kwargs))
        except asyncio.CancelledError:
            root.set_status(Status(StatusCode.ERROR, "cancelled"))
            raise
