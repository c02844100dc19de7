"""Replaying a recorded rollout: the agent runs again, every model reply comes from the record.

``replay_rollout`` reads one attempt of a rollout (its task, resources and recorded LLM calls)
from a store, starts a replay upstream on 127.0.0.1 that serves those calls
(``fulmen.debugging.replay_upstream``), and runs the agent on the same task through the normal
path: a private in-memory store, fulmen's gateway in front of the replay upstream, a runner
that gives the agent its ``llm`` resource. No model is needed. The report says which requests
diverged from the recorded ones (with a diff), how many recorded calls were used, and the
reward the agent computes now next to the one the run recorded. The store read from is not
written to.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.asgi_task import AppTask, loopback_socket
from fulmen.debugging.divergence import Divergence
from fulmen.debugging.replay_upstream import DivergencePolicy, RecordedReplies, create_replay_app
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from fulmen.agent.rollouts import RolloutSettings
    from fulmen.store.base import Store
    from fulmen.types import LLMCall, Resources, Rollout

__all__ = [
    "REPLAYABLE_ENDPOINTS",
    "ReplayReport",
    "expected_requests",
    "format_replay",
    "replay_rollout",
]

REPLAYABLE_ENDPOINTS = frozenset({"chat/completions", "completions"})
_REWARD_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found.

    Attributes:
        rollout_id / attempt_id: the replayed attempt.
        recorded_calls: calls the attempt recorded.
        requests: model requests the agent made in the replay.
        served: recorded calls the replay answered with.
        divergences: requests that matched no recorded call still unserved, in order.
        recorded_reward: the reward the run's agent reported (reward spans; rewards posted to
            the store later are in ``posted_reward``).
        posted_reward: the rollout's reward including rewards posted after the run, when that
            differs from ``recorded_reward``.
        reward: the reward the agent reported in the replay (``None``: none, or it failed).
        status: the replayed rollout's final status (``succeeded``, ``failed``, ...).
        recorded_status: the recorded attempt's status (``succeeded``, ``failed``,
            ``timeout``, ...), so a run that failed and fails again the same way is a faithful
            replay too.
        error: the agent's error in the replay, if it failed.
    """

    rollout_id: str
    attempt_id: str | None
    recorded_calls: int
    requests: int
    served: int
    divergences: tuple[Divergence, ...]
    recorded_reward: float | None
    posted_reward: float | None
    reward: float | None
    status: str
    recorded_status: str | None
    error: str | None

    @property
    def is_reward_same(self) -> bool:
        """Whether the replay's reward equals the recorded one (both ``None`` counts)."""
        if self.reward is None or self.recorded_reward is None:
            return self.reward is None and self.recorded_reward is None
        return abs(self.reward - self.recorded_reward) <= _REWARD_TOLERANCE

    @property
    def is_faithful(self) -> bool:
        """Whether the replay repeated the run: no divergence, every call used, same reward."""
        return (
            not self.divergences
            and self.served == self.recorded_calls
            and (self.status == "succeeded") == (self.recorded_status == "succeeded")
            and self.is_reward_same
        )


async def replay_rollout(
    store: Store,
    rollout_id: str,
    *,
    agent: Any,
    rollouts: RolloutSettings,
    attempt_id: str | None = None,
    on_divergence: DivergencePolicy = "stop",
) -> ReplayReport:
    """Run ``agent`` on the task of ``rollout_id`` with its recorded replies; see the module.

    Args:
        store: where the rollout was recorded (only read).
        rollout_id: the rollout to replay.
        agent: what to run (``"module:object"``, a ``@rollout`` function, an ``Agent``).
        rollouts: runner settings (concurrency, sync isolation, the attempt's timeout).
        attempt_id: the attempt to replay (default: the rollout's latest).
        on_divergence: ``stop`` answers a diverging request with an error, ``serve`` answers
            it with the next recorded reply and goes on.

    Raises ``ConfigError`` when the attempt recorded no calls, or a call of an endpoint the
    replay cannot serve (the Responses API).
    """
    from fulmen.transitions.signals import latest_reward
    from fulmen.transitions.trajectory import load_attempt

    records = await load_attempt(store, rollout_id, attempt_id=attempt_id)
    rollout = await store.get_rollout(rollout_id)
    if not records.calls:
        raise ConfigError(f"rollout {rollout_id!r} recorded no LLM calls: nothing to replay")
    unsupported = sorted({c.endpoint for c in records.calls} - REPLAYABLE_ENDPOINTS)
    if unsupported:
        raise ConfigError(
            f"rollout {rollout_id!r} has calls to {unsupported}; replay serves only "
            f"{sorted(REPLAYABLE_ENDPOINTS)}"
        )
    resources = None
    if rollout.resources_version is not None:
        resources = await store.get_resources(rollout.resources_version)
    replies = RecordedReplies(
        records.calls, expected_requests(records.calls, resources, rollout.mode.value),
        on_divergence=on_divergence,
    )  # fmt: skip
    outcome = await _run_replay(rollout, resources, replies, agent, rollouts)
    recorded = latest_reward(records.spans)
    posted = records.final_reward
    recorded_status = None
    if records.attempt_id is not None:
        recorded_status = (await store.get_attempt(records.attempt_id)).status.value
    return ReplayReport(
        rollout_id=rollout_id,
        attempt_id=records.attempt_id,
        recorded_calls=len(records.calls),
        requests=replies.requests,
        served=len(replies.served),
        divergences=tuple(replies.divergences),
        recorded_reward=recorded,
        posted_reward=posted if posted != recorded else None,
        reward=outcome[0],
        status=outcome[1],
        recorded_status=recorded_status,
        error=outcome[2],
    )


def expected_requests(
    calls: Sequence[LLMCall], resources: Resources | None, mode: str
) -> list[tuple[str, dict[str, Any]]]:
    """Return each call's ``(endpoint, body)`` as the gateway sent it to the engine."""
    from fulmen.gateway.capture import prepare_request
    from fulmen.gateway.context import sampling_overrides

    out: list[tuple[str, dict[str, Any]]] = []
    for call in calls:
        request: dict[str, Any] = dict(call.request)
        overrides = sampling_overrides(resources, mode, request.get("model")) if resources else {}
        body, _ = prepare_request(
            request, endpoint=call.endpoint, overrides=overrides, is_token_level=True
        )
        out.append((call.endpoint, body))
    return out


async def _run_replay(
    rollout: Rollout,
    resources: Resources | None,
    replies: RecordedReplies,
    agent: Any,
    rollouts: RolloutSettings,
) -> tuple[float | None, str, str | None]:
    """Run the rollout once on a private stack; return its reward, status and error."""
    from fulmen.engines.config import EngineConfig
    from fulmen.trainer.stack import TrainingStack
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import ResourcesCreate, RolloutConfig, RolloutCreate

    async with _serving(create_replay_app(replies)) as upstream_url:
        stack = TrainingStack(
            store_url="memory://",
            agent=agent,
            model=_model_of(resources),
            engine=EngineConfig(kind="endpoint", url=f"{upstream_url}/v1"),
            rollouts=rollouts,
            log_dir=Path("."),  # an endpoint engine writes no log
        )
        async with stack:
            version = None
            if resources is not None:
                created = ResourcesCreate(resources=dict(resources.resources))
                version = (await stack.store.add_resources(created)).version
            replay_id = f"replay-{rollout.rollout_id}"[:128]
            await stack.store.enqueue(
                [
                    RolloutCreate(
                        input=rollout.input,
                        mode=rollout.mode,
                        task_id=rollout.task_id,
                        rollout_id=replay_id,
                        resources_version=version,
                        config=RolloutConfig(timeout_s=rollouts.timeout_s, max_attempts=1),
                    )
                ]
            )
            deadline = time.monotonic() + rollouts.timeout_s + 30
            while not await stack.store.wait_for_rollouts([replay_id], timeout=1.0):
                stack.check_runner()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the replay of {rollout.rollout_id!r} did not finish")
            done = await stack.store.get_rollout(replay_id)
            attempts = await stack.store.list_attempts(replay_id)
            records = await load_attempt(stack.store, replay_id)
            error = attempts[-1].error if attempts else done.error
            return records.final_reward, done.status.value, error


def _model_of(resources: Resources | None) -> str:
    from fulmen.types import LLMResource

    if resources is not None:
        for resource in resources.resources.values():
            if isinstance(resource, LLMResource):
                return resource.model
    return "replay"


@contextlib.asynccontextmanager
async def _serving(app: Starlette) -> AsyncIterator[str]:
    """Serve ``app`` on a free 127.0.0.1 port inside this event loop; yield its root URL."""
    serving = AppTask(app, name="fulmen-replay-upstream")
    port = await serving.start(loopback_socket())
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await serving.stop(10)


def format_replay(report: ReplayReport) -> str:
    """Return the report as text: the verdict, calls, rewards and each divergence's diff."""
    verdict = "same as recorded" if report.is_faithful else "DIFFERS from the recording"
    lines = [
        f"replay of rollout {report.rollout_id} (attempt {report.attempt_id}): {verdict}",
        f"  calls:    {report.requests} requests, {report.served} of {report.recorded_calls} "
        f"recorded replies served, {len(report.divergences)} diverged",
        f"  reward:   recorded {_reward(report.recorded_reward)} -> replay "
        f"{_reward(report.reward)}" + ("" if report.is_reward_same else "  (changed)"),
        f"  status:   {report.status} (recorded: {report.recorded_status})",
    ]
    if report.posted_reward is not None:
        lines.append(f"  (with rewards posted after the run: {_reward(report.posted_reward)})")
    if report.error:
        lines.append(f"  error:    {report.error.strip().splitlines()[-1][:300]}")
    for divergence in report.divergences:
        served = "served the recorded reply anyway" if divergence.served else "refused"
        lines.append(f"\n{divergence.summary()} ({served})")
        if divergence.diff:
            lines.append(divergence.diff)
    return "\n".join(lines)


def _reward(value: float | None) -> str:
    return "none" if value is None else f"{value:.4f}"
