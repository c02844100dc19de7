"""``RewardJudge``: score a group of finished rollouts on a rubric.

For a group (the rollouts of one task in one step) it asks the judge one rubric call per
rollout for the ``question`` criteria, one ranking call per ``rank`` criterion for the whole
group (rollouts with identical content shown once and tied, unless the criterion forbids
ties), and runs the ``check`` functions. Each rollout's scores (in [0, 1]) and their weighted
mean, the primary, make its ``Judgement``; a failure of any of its criteria makes it a
``Judgement`` with an ``error`` and no values, never a 0. Answers are cached by request hash
(``fulmen.rewards.cache``); a format error gets one retry with what was wrong, then fails.
A call the judge could not answer (429, 5xx, unreachable) is retried by ``JudgeClient`` as
``judge.retry`` says before it fails.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from fulmen.errors import ConfigError, EngineError
from fulmen.importing import import_object
from fulmen.rewards.cache import JudgeCache, request_key
from fulmen.rewards.client import CallRecorder, JudgeClient, Sleep
from fulmen.rewards.config import Criterion, RewardConfig
from fulmen.rewards.content import JudgedRollout, render_content, render_task
from fulmen.rewards.prompts import (
    FormatError,
    parse_scores,
    ranking_messages,
    ranking_scores,
    read_ranking,
    retry_messages,
    rubric_messages,
)
from fulmen.types.limits import JsonData

__all__ = ["CheckFunction", "JudgeCounts", "JudgeFailed", "Judgement", "RewardJudge"]

CheckFunction = Callable[[JudgedRollout], "float | bool | Awaitable[float | bool]"]
_T = TypeVar("_T")


class JudgeFailed(Exception):
    """A criterion could not be scored (the message says which and why)."""


@dataclass(frozen=True)
class Judgement:
    """One rollout's scores, or why it has none.

    Attributes:
        rollout_id: the rollout.
        values: each criterion's score and the primary (``RewardConfig.name``); ``None`` on
            error.
        error: why the rollout could not be scored; ``None`` when it was.
    """

    rollout_id: str
    values: dict[str, float] | None = None
    error: str | None = None


@dataclass
class JudgeCounts:
    """What a ``RewardJudge`` did.

    Attributes:
        requests: questions sent to the judge (each may take several tries).
        cache_hits: answers reused from the cache or from the same question in flight.
        retries: questions asked again after an answer out of format.
        http_retries: tries sent again after a 429, a 5xx, a connection error or a timeout.
        failures: rollouts left unscored.
    """

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    http_retries: int = 0
    failures: int = 0


class RewardJudge:
    """Scores groups of rollouts on ``config``'s rubric (see the module docstring).

    Args:
        config: the rubric and the judge.
        api_key: the judge's API key (read from ``judge.api_key_env`` by the caller).
        cache: kept answers; ``None``: an in-memory cache for this judge's life.
        record: stores the judge's call records.
        transport: an ``httpx`` transport for tests.
        sleep: waits between tries of a failed call (``asyncio.sleep``; tests note the wait).

    Raises ``ConfigError`` when a ``check`` function cannot be imported.
    """

    def __init__(
        self,
        config: RewardConfig,
        *,
        api_key: str | None = None,
        cache: JudgeCache | None = None,
        record: CallRecorder | None = None,
        transport: Any = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.config = config
        self.cache = cache if cache is not None else JudgeCache(None)
        self.counts = JudgeCounts()
        self._checks = {c.name: _load_check(c) for c in config.criteria if c.check is not None}
        self._client = (
            JudgeClient(
                config.judge, api_key=api_key, record=record, transport=transport, sleep=sleep
            )
            if config.judge is not None
            else None
        )
        limit = config.judge.concurrency if config.judge is not None else 1
        self._slots = asyncio.Semaphore(limit)
        self._inflight: dict[str, asyncio.Future[Any]] = {}

    async def aclose(self) -> None:
        """Close the judge's HTTP connections."""
        if self._client is not None:
            await self._client.aclose()

    async def __aenter__(self) -> RewardJudge:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def judge_groups(self, groups: Sequence[Sequence[JudgedRollout]]) -> list[Judgement]:
        """Judge every group; returns one ``Judgement`` per rollout, groups in order."""
        results = await asyncio.gather(*(self.judge_group(g) for g in groups))
        return [j for group in results for j in group]

    async def judge_group(self, group: Sequence[JudgedRollout]) -> list[Judgement]:
        """Judge the rollouts of one task's group (see the module docstring)."""
        scores: list[dict[str, float]] = [{} for _ in group]
        errors: list[list[str]] = [[] for _ in group]
        questions = [c for c in self.config.criteria if c.kind == "question"]
        ranks = [c for c in self.config.criteria if c.kind == "rank"] if len(group) > 1 else []
        jobs: list[Awaitable[None]] = (
            [self._rubric(run, questions, scores[i], errors[i]) for i, run in enumerate(group)]
            if questions
            else []
        )
        jobs += [self._ranking(group, c, scores, errors) for c in ranks]
        jobs += [
            self._check(run, c, scores[i], errors[i])
            for c in self.config.criteria
            if c.kind == "check"
            for i, run in enumerate(group)
        ]
        await asyncio.gather(*jobs)
        return [self._judgement(run, scores[i], errors[i]) for i, run in enumerate(group)]

    def _judgement(
        self, run: JudgedRollout, scores: dict[str, float], errors: list[str]
    ) -> Judgement:
        if errors:
            self.counts.failures += 1
            return Judgement(run.rollout_id, error="; ".join(errors))
        weights = {c.name: c.weight for c in self.config.criteria if c.name in scores}
        if not weights:
            self.counts.failures += 1
            return Judgement(
                run.rollout_id,
                error="every criterion is a rank and this rollout had no group to be ranked in "
                "(it ran alone, as validation rollouts do, or the others failed): add a "
                "question or check criterion to score such rollouts",
            )
        total = sum(weights.values())
        primary = math.fsum(weights[n] * scores[n] for n in weights) / total
        ordered = {c.name: scores[c.name] for c in self.config.criteria if c.name in scores}
        return Judgement(run.rollout_id, values={**ordered, self.config.name: primary})

    async def _rubric(
        self,
        run: JudgedRollout,
        criteria: Sequence[Criterion],
        scores: dict[str, float],
        errors: list[str],
    ) -> None:
        judge = self._judge_config()
        messages = rubric_messages(
            judge, criteria, task=render_task(run.task), content=self._content(run)
        )
        names = [c.name for c in criteria]
        try:
            value = await self._ask(
                messages, lambda text: parse_scores(text, names=names, scale=judge.scale)
            )
        except JudgeFailed as exc:
            errors.append(f"rubric ({', '.join(names)}): {exc}")
            return
        scores.update(cast("dict[str, float]", value))

    async def _ranking(
        self,
        group: Sequence[JudgedRollout],
        criterion: Criterion,
        scores: list[dict[str, float]],
        errors: list[list[str]],
    ) -> None:
        judge = self._judge_config()
        contents = [self._content(run) for run in group]
        ties = criterion.ties == "equal"
        # With ties, the judge sees each distinct content once: identical rollouts tie.
        shown = list(dict.fromkeys(contents)) if ties else contents
        copies = [contents.count(c) for c in shown] if ties else [1] * len(contents)
        if len(shown) == 1:
            places: list[list[int]] = [[0]]  # every rollout the same: one shared place
        else:
            messages = ranking_messages(
                judge, criterion, task=render_task(group[0].task), contents=shown
            )
            try:
                value = await self._ask(
                    messages, lambda text: read_ranking(text, size=len(shown), ties=ties)
                )
            except JudgeFailed as exc:
                for problems in errors:
                    problems.append(f"ranking {criterion.name!r} of the group: {exc}")
                return
            places = _places(value, size=len(shown))
        by_shown = ranking_scores(places, copies=copies)
        for i, (content, place) in enumerate(zip(contents, scores, strict=True)):
            place[criterion.name] = by_shown[shown.index(content) if ties else i]

    async def _check(
        self, run: JudgedRollout, criterion: Criterion, scores: dict[str, float], errors: list[str]
    ) -> None:
        try:
            value: Any = self._checks[criterion.name](run)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # the user's function: report it on this rollout
            errors.append(f"check {criterion.name!r} ({criterion.check}) raised {exc!r}")
            return
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            errors.append(
                f"check {criterion.name!r} ({criterion.check}) returned {value!r}, "
                "not a number in [0, 1]"
            )
            return
        scores[criterion.name] = float(value)

    async def _ask(self, messages: list[dict[str, str]], parse: Callable[[str], _T]) -> JsonData:
        """Return the parsed answer to ``messages``: cached, in flight, or newly asked."""
        client = self._judge_client()
        key = request_key(client.base_url, client.request(messages))
        cached = self.cache.get(key)
        if cached is not None:
            self.counts.cache_hits += 1
            return cached
        pending = self._inflight.get(key)
        if pending is not None:  # the same question is being asked right now
            self.counts.cache_hits += 1
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            value = cast("JsonData", await self._call(client, messages, parse))
        except JudgeFailed as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it too, nobody is warned
            raise
        finally:
            del self._inflight[key]
        future.set_result(value)
        self.cache.put(key, value)
        return value

    async def _call(
        self, client: JudgeClient, messages: list[dict[str, str]], parse: Callable[[str], _T]
    ) -> _T:
        sent = messages
        for attempt in (1, 2):
            async with self._slots:
                self.counts.requests += 1
                try:
                    answer = await client.complete(sent)
                except EngineError as exc:
                    raise JudgeFailed(str(exc)) from None
                finally:
                    self.counts.http_retries = client.retries
            try:
                return parse(answer)
            except FormatError as exc:
                if attempt == 2:
                    raise JudgeFailed(
                        f"the judge answered out of format twice ({exc}); its last answer: "
                        f"{answer[:300]!r}"
                    ) from None
                self.counts.retries += 1
                sent = retry_messages(messages, answer, str(exc))
        raise AssertionError("unreachable")  # pragma: no cover

    def _content(self, run: JudgedRollout) -> str:
        judge = self._judge_config()
        return render_content(run, mode=judge.content, max_chars=judge.max_content_chars)

    def _judge_config(self) -> Any:
        if self.config.judge is None:  # RewardConfig refuses judged criteria without a judge
            raise ConfigError("reward.judge is not set")
        return self.config.judge

    def _judge_client(self) -> JudgeClient:
        if self._client is None:
            raise ConfigError("reward.judge is not set")
        return self._client


def _places(value: Any, *, size: int) -> list[list[int]]:
    """Return a cached ranking as places (``read_ranking``'s form).

    A cache written before ties existed holds each label's score instead (a strict order,
    ``(n - r) / (n - 1)``), which gives the same places back.
    """
    items = cast("list[Any]", value)
    if all(isinstance(item, list) for item in items):
        return [[int(i) for i in cast("list[Any]", item)] for item in items]
    order = sorted(range(size), key=lambda i: -float(items[i]))
    return [[i] for i in order]


def _load_check(criterion: Criterion) -> CheckFunction:
    value = import_object(str(criterion.check), what=f"reward check {criterion.name!r}")
    if not callable(value):
        raise ConfigError(
            f"reward check {criterion.name!r}: {criterion.check} is a {type(value).__name__}, "
            "not callable"
        )
    return cast("CheckFunction", value)
