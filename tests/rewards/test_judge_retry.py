"""Judge calls retried on 429, 5xx and unreachable judges, against a real scripted upstream.

The waits are noted by an injected ``sleep`` instead of slept (one test sleeps for real, a few
milliseconds), so every test runs in well under a second.
"""

from __future__ import annotations

import email.utils
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from fulmen.chat_call import ChatCall
from fulmen.rewards import JudgeRetry, RewardConfig
from fulmen.rewards.posting import judge_rollouts
from fulmen.rewards.retry import backoff_of, retry_after_seconds, retry_decision
from fulmen.rewards.scoring import RewardJudge
from fulmen.store import open_store
from fulmen.types import LLMCallCreate
from tests.gateway.scripted_upstream import serve_app
from tests.rewards.status_judge import Answer, StatusJudge, create_status_app
from tests.rewards.test_judge import final, finished


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[StatusJudge, str]]:
    judge = StatusJudge()
    async with serve_app(create_status_app(judge)) as url:
        yield judge, f"{url}/v1"


@pytest.fixture
async def store() -> AsyncIterator[Any]:
    async with open_store("memory://", watchdog_interval=None) as opened:
        yield opened


class Sleeps:
    """An injected ``sleep``: notes each wait, sleeps none."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def rubric(url: str, **retry: Any) -> RewardConfig:
    return RewardConfig.model_validate(
        {
            "judge": {"base_url": url, "model": "judge-model", "retry": retry},
            "criteria": [{"name": "goal", "question": "Does it greet?"}],
        }
    )


async def judged(store: Any, config: RewardConfig, sleep: Sleeps) -> tuple[Any, RewardJudge]:
    rollouts = await finished(store, ["hello"])
    recorded: list[LLMCallCreate] = []

    async def record(calls: Sequence[LLMCallCreate]) -> None:
        recorded.extend(calls)

    async with RewardJudge(config, record=record, sleep=sleep) as judge:
        [judgement] = await judge_rollouts(store, judge, [rollouts])
    judge.recorded = recorded  # type: ignore[attr-defined]
    return judgement, judge


async def test_a_429_is_retried_after_the_seconds_its_retry_after_asks_for(
    upstream: tuple[StatusJudge, str], store: Any
) -> None:
    script, url = upstream
    script.answers = deque([Answer(429, {"retry-after": "2"})])
    sleep = Sleeps()
    judgement, judge = await judged(store, rubric(url), sleep)
    assert judgement.values == {"goal": 0.8, "reward": 0.8}
    assert script.calls == 2 and sleep.waits == [2.0]
    assert judge.counts.http_retries == 1 and judge.counts.requests == 1
    # Each try is its own call record: the 429 too, with its status.
    first, second = judge.recorded  # type: ignore[attr-defined]
    assert first.error["status"] == 429 and second.error is None
    assert await final(store, "r0") == pytest.approx(0.8)


async def test_a_retry_after_date_is_waited_for_until_that_moment(
    upstream: tuple[StatusJudge, str], store: Any
) -> None:
    script, url = upstream
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    script.answers = deque([Answer(429, {"retry-after": when})])
    sleep = Sleeps()
    judgement, _ = await judged(store, rubric(url), sleep)
    assert judgement.values is not None and script.calls == 2
    [wait] = sleep.waits
    assert 28.0 <= wait <= 30.0  # the date has whole seconds


async def test_503_twice_then_200_backs_off_with_jitter_under_the_cap(
    upstream: tuple[StatusJudge, str], store: Any
) -> None:
    script, url = upstream
    script.answers = deque([Answer(503), Answer(503)])
    sleep = Sleeps()
    config = rubric(url, initial_delay_s=0.5, max_delay_s=0.75)
    judgement, judge = await judged(store, config, sleep)
    assert judgement.values == {"goal": 0.8, "reward": 0.8}
    assert script.calls == 3 and judge.counts.http_retries == 2
    # Full jitter: uniform in [0, min(max, initial * 2**(n-1))].
    assert len(sleep.waits) == 2
    assert 0.0 <= sleep.waits[0] <= 0.5 and 0.0 <= sleep.waits[1] <= 0.75


async def test_the_default_sleep_really_waits_and_then_scores(
    upstream: tuple[StatusJudge, str], store: Any
) -> None:
    script, url = upstream
    script.answers = deque([Answer(502), Answer(500)])
    rollouts = await finished(store, ["hello"])
    config = rubric(url, initial_delay_s=0.005, max_delay_s=0.01)
    async with RewardJudge(config) as judge:
        [judgement] = await judge_rollouts(store, judge, [rollouts])
    assert judgement.values is not None and script.calls == 3


async def test_a_400_is_not_retried_and_the_rollout_gets_the_error(
    upstream: tuple[StatusJudge, str], store: Any
) -> None:
    script, url = upstream
    script.default = Answer(400, {"retry-after": "1"})
    sleep = Sleeps()
    judgement, judge = await judged(store, rubric(url), sleep)
    assert script.calls == 1 and sleep.waits == [] and judge.counts.http_retries == 0
    assert judgement.values is None
    assert "'status': 400" in (judgement.error or "") and "tries" not in (judgement.error or "")
    posted = (await store.list_rewards("r0"))[-1]
    assert posted.metadata["scoring_error"] == judgement.error
    assert await final(store, "r0") is None  # no reward, never a silent 0


async def test_an_always_failing_judge_gives_up_after_the_configured_attempts(
    upstream: tuple[StatusJudge, str], store: Any
) -> None:
    script, url = upstream
    script.default = Answer(500)
    sleep = Sleeps()
    judgement, judge = await judged(store, rubric(url, attempts=3), sleep)
    assert script.calls == 3 and len(sleep.waits) == 2 and judge.counts.http_retries == 2
    assert len(judge.recorded) == 3  # type: ignore[attr-defined]
    error = judgement.error or ""
    assert "'status': 500" in error and "gave up after 3 tries" in error
    assert await final(store, "r0") is None


async def test_a_retry_after_past_the_deadline_fails_at_once(
    upstream: tuple[StatusJudge, str], store: Any
) -> None:
    script, url = upstream
    script.default = Answer(429, {"retry-after": "600"})
    sleep = Sleeps()
    judgement, _ = await judged(store, rubric(url, deadline_s=60), sleep)
    assert script.calls == 1 and sleep.waits == []
    assert "Retry-After asked for 600 s" in (judgement.error or "")
    assert "deadline_s (60 s)" in (judgement.error or "")


async def test_an_unreachable_judge_is_retried_then_fails_with_the_connect_error(
    store: Any,
) -> None:
    sleep = Sleeps()
    judgement, judge = await judged(store, rubric("http://127.0.0.1:9/v1", attempts=2), sleep)
    assert len(sleep.waits) == 1 and judge.counts.http_retries == 1
    assert "ConnectError" in (judgement.error or "")
    assert "gave up after 2 tries" in (judgement.error or "")


def test_retry_after_values_and_the_decision_as_pure_functions() -> None:
    assert retry_after_seconds(None, now=0.0) is None
    assert retry_after_seconds(" 3 ", now=0.0) == 3.0
    assert retry_after_seconds("-5", now=0.0) == 0.0
    assert retry_after_seconds("nan", now=0.0) is None
    assert retry_after_seconds("Thu, 01 Jan 1970 00:01:40 GMT", now=40.0) == 60.0
    assert retry_after_seconds("Thu, 01 Jan 1970 00:00:10 GMT", now=40.0) == 0.0  # past
    retry = JudgeRetry(attempts=2, initial_delay_s=1.0, max_delay_s=1.0, deadline_s=10)
    backoff = backoff_of(retry)

    def call(*, status: int | None, retryable: bool, after: str | None = None) -> ChatCall:
        error = {"status": status, "body": ""} if status else {"message": "ReadTimeout"}
        return ChatCall(None, error, None, {}, 0.0, 0.0, retryable, after)

    timeout = call(status=None, retryable=True)
    assert 0.0 <= (retry_decision(
        timeout, retry=retry, backoff=backoff, tries=1, elapsed_s=0.0, now=0.0
    ).wait_s or 0.0) <= 1.0  # fmt: skip
    assert retry_decision(
        timeout, retry=retry, backoff=backoff, tries=2, elapsed_s=0.0, now=0.0
    ).reason.startswith("gave up after 2 tries")
    refused = retry_decision(
        call(status=404, retryable=False), retry=retry, backoff=backoff, tries=1, elapsed_s=0.0,
        now=0.0,
    )  # fmt: skip
    assert refused.wait_s is None and refused.reason == ""
    late = retry_decision(
        call(status=429, retryable=True, after="5"), retry=retry, backoff=backoff, tries=1,
        elapsed_s=6.0, now=0.0,
    )  # fmt: skip
    assert late.wait_s is None and "deadline_s" in late.reason


def test_the_retry_settings_have_safe_defaults_and_refuse_nonsense() -> None:
    retry = rubric("http://x/v1").judge.retry  # type: ignore[union-attr]
    assert (retry.attempts, retry.initial_delay_s, retry.max_delay_s, retry.deadline_s) == (
        4,
        1.0,
        30.0,
        300.0,
    )
    with pytest.raises(ValueError, match="attempts"):
        rubric("http://x/v1", attempts=0)
    with pytest.raises(ValueError, match="extra"):
        rubric("http://x/v1", tries=3)
