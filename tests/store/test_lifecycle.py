"""The lifecycle rules as pure functions, without a backend (the conformance suite covers all).

These pin the decisions ``fulmen.store.lifecycle`` makes for every backend: what an enqueue
creates, what a claim starts, how a report, an expiry or a cancel moves an attempt and its
rollout.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fulmen.errors import Conflict, InvalidRequest, InvalidTransition, NotFound
from fulmen.store.lifecycle import (
    attempts_used,
    cancelled,
    check_caller_status,
    claimed,
    expired_attempt,
    is_claimable,
    is_running_on,
    new_rollout,
    repeated_rollout,
    reported_attempt,
    rollout_after_attempt,
    seen_worker,
)
from fulmen.types import (
    UNSET,
    AttemptStatus,
    Mode,
    Rollout,
    RolloutConfig,
    RolloutCreate,
    RolloutStatus,
    Worker,
)

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def _queued(config: RolloutConfig | None = None, rollout_id: str | None = None) -> Rollout:
    request = RolloutCreate(input={"q": 1}, rollout_id=rollout_id, config=config or RolloutConfig())
    return new_rollout(request, fresh_id="ro-1", position=1, latest_resources=0, now=NOW)


def test_new_rollout_takes_the_latest_resources_unless_it_names_one() -> None:
    request = RolloutCreate(input=1)
    none = new_rollout(request, fresh_id="ro-1", position=3, latest_resources=0, now=NOW)
    assert (none.rollout_id, none.position, none.resources_version) == ("ro-1", 3, None)
    assert none.status is RolloutStatus.QUEUING
    latest = new_rollout(request, fresh_id="ro-1", position=3, latest_resources=2, now=NOW)
    assert latest.resources_version == 2
    named = RolloutCreate(input=1, rollout_id="mine", resources_version=1)
    kept = new_rollout(named, fresh_id="ro-1", position=3, latest_resources=2, now=NOW)
    assert (kept.rollout_id, kept.resources_version) == ("mine", 1)
    with pytest.raises(NotFound):
        new_rollout(
            RolloutCreate(input=1, resources_version=3),
            fresh_id="ro-1",
            position=3,
            latest_resources=2,
            now=NOW,
        )


def test_a_repeated_enqueue_returns_the_stored_rollout_or_conflicts() -> None:
    rollout = _queued(rollout_id="ro-1")
    assert repeated_rollout(rollout, RolloutCreate(input={"q": 1}, rollout_id="ro-1")) is rollout
    with pytest.raises(Conflict):
        repeated_rollout(rollout, RolloutCreate(input={"q": 2}, rollout_id="ro-1"))


def test_a_claim_starts_the_next_attempt_and_keeps_the_first_start() -> None:
    rollout = _queued()
    assert is_claimable(rollout, None) and is_claimable(rollout, [Mode.TRAIN])
    assert not is_claimable(rollout, [Mode.VAL])
    first = claimed(rollout, worker_id="w", attempt_id="at-1", now=NOW)
    assert (first.attempt.number, first.rollout.attempt_count) == (1, 1)
    assert first.rollout.status is RolloutStatus.RUNNING and not is_claimable(first.rollout, None)
    requeued = first.rollout.model_copy(update={"status": RolloutStatus.QUEUING})
    later = NOW + timedelta(seconds=5)
    second = claimed(requeued, worker_id="w", attempt_id="at-2", now=later)
    assert (second.attempt.number, second.rollout.started_at) == (2, NOW)
    assert second.attempt.started_at == later


def test_a_report_ends_a_running_attempt_and_is_kept_aside_once_final() -> None:
    attempt = claimed(_queued(), worker_id="w", attempt_id="at-1", now=NOW).attempt
    with pytest.raises(InvalidRequest):
        reported_attempt(attempt, status=AttemptStatus.TIMEOUT, error=UNSET, now=NOW)
    ended = reported_attempt(attempt, status=AttemptStatus.FAILED, error="boom", now=NOW)
    assert ended is not None
    assert (ended.status, ended.error, ended.ended_at) == (AttemptStatus.FAILED, "boom", NOW)
    assert reported_attempt(ended, status=UNSET, error=UNSET, now=NOW) is None
    late = reported_attempt(ended, status=AttemptStatus.SUCCEEDED, error=UNSET, now=NOW)
    assert late is not None
    assert (late.status, late.late_status) == (AttemptStatus.FAILED, AttemptStatus.SUCCEEDED)


def test_expiry_prefers_the_timeout_and_names_the_cause() -> None:
    config = RolloutConfig(timeout_s=10, heartbeat_timeout_s=5)
    attempt = claimed(_queued(config), worker_id="w", attempt_id="at-1", now=NOW).attempt
    assert expired_attempt(attempt, config, NOW + timedelta(seconds=4)) is None
    lost = expired_attempt(attempt, config, NOW + timedelta(seconds=5))
    assert lost is not None and lost.status is AttemptStatus.LOST
    timed_out = expired_attempt(attempt, config, NOW + timedelta(seconds=10))
    assert timed_out is not None and timed_out.status is AttemptStatus.TIMEOUT
    assert timed_out.error == "attempt timed out after 10 s"


def test_the_rollout_retries_while_attempts_remain_and_released_ones_are_free() -> None:
    config = RolloutConfig(max_attempts=2)
    claim = claimed(_queued(config), worker_id="w", attempt_id="at-1", now=NOW)
    lost = claim.attempt.model_copy(
        update={"status": AttemptStatus.LOST, "ended_at": NOW, "error": "gone"}
    )
    requeued = rollout_after_attempt(claim.rollout, lost, attempts_used([lost.status]))
    assert requeued is not None
    assert (requeued.status, requeued.ended_at, requeued.position) == (
        RolloutStatus.QUEUING,
        None,
        claim.rollout.position,
    )
    failed = rollout_after_attempt(claim.rollout, lost, 2)
    assert failed is not None
    assert (failed.status, failed.error, failed.ended_at) == (RolloutStatus.FAILED, "gone", NOW)
    assert attempts_used([AttemptStatus.RELEASED, AttemptStatus.LOST]) == 1
    gone = claim.rollout.model_copy(update={"status": RolloutStatus.CANCELLED})
    assert rollout_after_attempt(gone, lost, 1) is None


def test_a_cancel_stops_the_running_attempt_only() -> None:
    claim = claimed(_queued(), worker_id="w", attempt_id="at-1", now=NOW)
    with pytest.raises(InvalidRequest):
        check_caller_status("ro-1", RolloutStatus.RUNNING, RolloutStatus.SUCCEEDED)
    with pytest.raises(InvalidTransition):
        check_caller_status("ro-1", RolloutStatus.SUCCEEDED, RolloutStatus.CANCELLED)
    rollout, stopped = cancelled(claim.rollout, claim.attempt, NOW)
    assert rollout.status is RolloutStatus.CANCELLED and rollout.ended_at == NOW
    assert stopped is not None and stopped.status is AttemptStatus.CANCELLED
    ended = claim.attempt.model_copy(update={"status": AttemptStatus.FAILED})
    assert cancelled(claim.rollout, ended, NOW)[1] is None
    assert cancelled(_queued(), None, NOW)[1] is None


def test_heartbeats_count_only_the_workers_own_running_attempts() -> None:
    attempt = claimed(_queued(), worker_id="w", attempt_id="at-1", now=NOW).attempt
    assert is_running_on(attempt, "w") and not is_running_on(attempt, "other")
    ended = attempt.model_copy(update={"status": AttemptStatus.SUCCEEDED})
    assert not is_running_on(ended, "w")
    before = Worker(worker_id="w", last_heartbeat_at=NOW, metadata={"host": "a"})
    kept = seen_worker(before, "w", now=NOW, running=["at-1"])
    assert (kept.metadata, kept.running_attempt_ids) == ({"host": "a"}, ["at-1"])
    assert seen_worker(before, "w", now=NOW, running=[], metadata={}).metadata == {}
    assert seen_worker(None, "w", now=NOW, running=[]).metadata == {}
