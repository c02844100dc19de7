"""Production sessions: untracked calls grouped by a session id, sampled, rate-limited, stored.

``SessionCapture`` receives every untracked call (``/v1/...``) the gateway answered, with the
session id read from the request (``SessionKeyConfig``). Calls of one session collect in
memory until the session has been idle for ``idle_timeout_s``; the closed session then
becomes the rollout ``session-<id>`` of mode ``production`` (``Store.record_session``) and its
calls are recorded on that rollout's new attempt through the gateway's ``CallRecorder``
(``SessionWriter``).

Whether a session is kept is decided once, from a seeded hash of its id (``sampling``). A
session that is not kept is held (bounded by count, bytes and time) when
``keep_if_reward_at_least`` is set, and written after all if a high enough reward for it
reaches the gateway's ``POST /v1/rewards`` in time. A reward for a session the gateway still
holds in memory (open, or closed and unsampled) is held with it and posted to the store right
after the session is written. Token buckets bound the records written per minute; over them a
call's record is shed (the call itself was answered long before). Nothing here awaits on the
request path: ``add`` only appends, and writing happens in background tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from fulmen.gateway.capture import Exchange
from fulmen.gateway.capture_config import CaptureConfig
from fulmen.gateway.rate_limit import TokenBucket
from fulmen.gateway.recorder import CallRecorder
from fulmen.gateway.sampling import is_sampled
from fulmen.gateway.session_writer import ClosedSession, SessionWriter
from fulmen.store.base import Store
from fulmen.store.clock import new_id
from fulmen.types import RewardCreate
from fulmen.types.rewards import SESSION_ROLLOUT_PREFIX

__all__ = ["CaptureCounters", "HeldReward", "SessionCapture"]

_log = logging.getLogger(__name__)


@dataclass
class CaptureCounters:
    """What production capture did with sessions and calls since the gateway started.

    Attributes:
        sessions_kept: sessions written because they were sampled.
        sessions_sampled_out: sessions closed that the sample did not keep (rescued ones
            included).
        sessions_buffered: unsampled sessions whose calls were held for a possible reward.
        sessions_rescued: unsampled sessions written because a reward crossed the threshold.
        sessions_dropped_from_buffer: held sessions dropped (time, count or bytes ran out, or
            the gateway stopped); an open one dropped for room holds none of its later calls.
        sessions_failed: sessions the store did not take (it refused them or stayed away).
        calls_recorded: calls of written sessions handed to the recorder.
        calls_shed: calls whose record was shed by ``max_calls_per_minute`` or
            ``max_spans_per_minute``.
        sessions_by_arm: sessions opened on each arm of a canary release (sampled or not).
    """

    sessions_kept: int = 0
    sessions_sampled_out: int = 0
    sessions_buffered: int = 0
    sessions_rescued: int = 0
    sessions_dropped_from_buffer: int = 0
    sessions_failed: int = 0
    calls_recorded: int = 0
    calls_shed: int = 0
    sessions_by_arm: Counter[str] = field(default_factory=Counter[str])


@dataclass(frozen=True)
class HeldReward:
    """The gateway's answer to a reward it holds instead of posting now (HTTP 202).

    ``status`` is ``held`` when the reward waits with its session (posted once the session is
    written), ``not_kept`` when the session was not sampled and is no longer held.
    """

    status: Literal["held", "not_kept"]
    session_id: str

    def body(self) -> dict[str, Any]:
        """Return the JSON body of the 202 answer."""
        return {"status": self.status, "session_id": self.session_id}


@dataclass(eq=False)
class _Session:
    session_id: str
    is_sampled: bool
    opened_at: float
    last_at: float
    closed_at: float = 0.0
    attempt_id: str = field(default_factory=lambda: new_id("at"))
    exchanges: list[Exchange] = field(default_factory=list)
    bytes: int = 0
    shed_calls: int = 0
    is_rescued: bool = False
    is_dropped: bool = False
    response_ids: list[str] = field(default_factory=list)
    rewards: list[RewardCreate] = field(default_factory=list)
    writing: asyncio.Task[None] | None = None
    release: str | None = None  # the canary release that routed it, and its arm
    arm: str | None = None

    @property
    def is_kept(self) -> bool:
        return self.is_sampled or self.is_rescued


class SessionCapture:
    """Groups untracked calls into sessions and writes the kept ones to the store.

    Args:
        config: the ``capture:`` section.
        store: where sessions and rewards go.
        recorder: the gateway's recorder, which writes (and redacts) the call records.
        worker_id: the name kept on every session's attempt.
        clock: monotonic seconds (injectable: tests move time instead of sleeping).
        flush_timeout_s: how long posting held rewards waits for the session's calls.
        close_timeout_s: how long closing waits for sessions still being written (the store
            away); what is unwritten then is lost, and counted as failed.
    """

    def __init__(
        self,
        config: CaptureConfig,
        *,
        store: Store,
        recorder: CallRecorder,
        worker_id: str = "gateway",
        clock: Callable[[], float] = time.monotonic,
        flush_timeout_s: float = 60.0,
        close_timeout_s: float = 10.0,
    ) -> None:
        self.config = config
        self.counters = CaptureCounters()
        self._writer = SessionWriter(
            store, recorder, worker_id=worker_id, flush_timeout_s=flush_timeout_s
        )
        self._clock = clock
        self._close_timeout_s = close_timeout_s
        self._open: dict[str, _Session] = {}
        self._held: OrderedDict[str, _Session] = OrderedDict()  # closed, unsampled; oldest first
        self._by_response: dict[str, _Session] = {}
        self._buffered_bytes = 0
        # Open unsampled sessions holding calls, oldest first (eviction order).
        self._buffering: dict[str, _Session] = {}
        self._calls = _bucket(config.max_calls_per_minute, clock)
        self._spans = _bucket(config.max_spans_per_minute, clock)
        self._writes: set[asyncio.Task[None]] = set()
        self._writing: dict[str, _Session] = {}  # by id, until written (rewards wait for it)
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    # -- the request path -----------------------------------------------------------------------

    def session_of(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        """Return the session id a request names (``SessionKeyConfig.session_id_of``)."""
        return self.config.session.session_id_of(headers, body)

    def add(self, exchange: Exchange, session_id: str | None) -> None:
        """Add an answered call to its session; a call with no session id is one alone."""
        now = self._clock()
        sid = session_id if session_id is not None else exchange.call_id
        session = self._open.get(sid)
        if session is None:
            sampled = is_sampled(sid, base_rate=self.config.base_rate, seed=self.config.seed)
            session = _Session(sid, is_sampled=sampled, opened_at=now, last_at=now)
            session.release, session.arm = exchange.release, exchange.arm
            if exchange.arm is not None:
                self.counters.sessions_by_arm[exchange.arm] += 1
            self._open[sid] = session
        session.last_at = now
        if session.is_kept:
            # A session's first record also makes its rollout and attempt: one span more.
            if self._admit(spans=1 if session.exchanges else 2):
                session.exchanges.append(exchange)
                self._index(session, exchange)
            else:
                session.shed_calls += 1
                self.counters.calls_shed += 1
        elif self.config.keep_if_reward_at_least is not None and not session.is_dropped:
            if not session.exchanges:
                self._buffering[sid] = session
                self.counters.sessions_buffered += 1
            size = _size(exchange)
            session.exchanges.append(exchange)
            session.bytes += size
            self._buffered_bytes += size
            self._index(session, exchange)
            self._evict_over_bounds()
        calls = len(session.exchanges) + session.shed_calls
        if session_id is None or calls >= self.config.session.max_calls:
            self._close(session)

    def _admit(self, *, spans: int) -> bool:
        """Take one call and ``spans`` span tokens, from both buckets or from neither."""
        if self._calls is not None and not self._calls.has(1):
            return False
        if self._spans is not None and not self._spans.has(spans):
            return False
        if self._calls is not None:
            self._calls.take(1)
        if self._spans is not None:
            self._spans.take(spans)
        return True

    def _index(self, session: _Session, exchange: Exchange) -> None:
        shown = exchange.shown or exchange.response or {}
        response_id = shown.get("id")
        if isinstance(response_id, str):
            self._by_response[response_id] = session
            session.response_ids.append(response_id)

    # -- closing, holding, dropping -------------------------------------------------------------

    async def close_idle(self) -> None:
        """One pass: close sessions idle past the timeout, drop held ones past their time."""
        now = self._clock()
        idle = self.config.session.idle_timeout_s
        for session in [s for s in self._open.values() if now - s.last_at >= idle]:
            self._close(session)
        ttl = self.config.buffer_ttl_s
        while self._held:
            oldest = next(iter(self._held.values()))
            if now - oldest.closed_at < ttl:
                break
            self._drop_held(oldest)

    def _close(self, session: _Session) -> None:
        del self._open[session.session_id]
        self._buffering.pop(session.session_id, None)
        if session.is_sampled:
            self.counters.sessions_kept += 1
        else:
            self.counters.sessions_sampled_out += 1
        if session.is_kept:
            self._write_later(session)
            return
        if session.is_dropped or self.config.keep_if_reward_at_least is None:
            self._forget(session)
            return
        if self.config.buffer_ttl_s <= 0:
            self.counters.sessions_dropped_from_buffer += 1
            self._forget(session)
            return
        session.closed_at = self._clock()
        self._held[session.session_id] = session
        self._evict_over_bounds()

    def _evict_over_bounds(self) -> None:
        """Drop held sessions, oldest first, then open unsampled ones, until within bounds."""
        while self._is_over_bounds():
            if self._held:
                self._drop_held(next(iter(self._held.values())))
                continue
            oldest = next(iter(self._buffering.values()), None)
            if oldest is None:
                return
            oldest.is_dropped = True  # its later calls are not held either
            self.counters.sessions_dropped_from_buffer += 1
            self._release(oldest)

    def _is_over_bounds(self) -> bool:
        return (
            len(self._held) + len(self._buffering) > self.config.buffer_max_sessions
            or self._buffered_bytes > self.config.buffer_max_bytes
        )

    def _drop_held(self, session: _Session) -> None:
        del self._held[session.session_id]
        self.counters.sessions_dropped_from_buffer += 1
        self._forget(session)

    def _release(self, session: _Session) -> None:
        """Free what an unsampled session holds in memory (its calls and response ids)."""
        self._buffering.pop(session.session_id, None)
        self._buffered_bytes -= session.bytes
        session.bytes = 0
        session.exchanges = []
        for response_id in session.response_ids:
            if self._by_response.get(response_id) is session:
                del self._by_response[response_id]
        session.response_ids = []

    def _forget(self, session: _Session) -> None:
        self._release(session)
        session.rewards = []

    # -- rewards --------------------------------------------------------------------------------

    async def before_reward(self, reward: RewardCreate) -> HeldReward | None:
        """Decide what a reward posted to the gateway does to the session it names.

        Returns ``None`` when the reward is to be posted to the store now (its session, if it
        names one, is in the store: it was written, or this reward rescued it and it was
        written just now), or a ``HeldReward`` when the gateway holds the reward with a
        session it still has in memory.
        """
        session = self._named(reward)
        if session is None:
            return None
        if session.writing is not None:  # being written: the reward follows it to the store
            await asyncio.shield(session.writing)
            return None
        threshold = self.config.keep_if_reward_at_least
        value = reward.values.get(reward.primary) if reward.primary is not None else None
        rescues = (
            not session.is_kept
            and not session.is_dropped
            and threshold is not None
            and value is not None
            and value >= threshold
        )
        if rescues:
            session.is_rescued = True
            self.counters.sessions_rescued += 1
            self._buffering.pop(session.session_id, None)
            self._buffered_bytes -= session.bytes
            session.bytes = 0
            if self._held.pop(session.session_id, None) is not None:
                # Closed: written now; the reward goes to the store once it is there.
                await asyncio.shield(self._write_later(session))
                return None
        if session.is_dropped:
            return HeldReward("not_kept", session.session_id)
        session.rewards.append(reward)
        return HeldReward("held", session.session_id)

    def not_kept(self, reward: RewardCreate) -> HeldReward | None:
        """Return ``not_kept`` if the store did not find a reward's unsampled session.

        Such a session was dropped, which is no error (202); ``None`` for any other reward.
        """
        sid = _named_session_id(reward)
        if sid is None or is_sampled(sid, base_rate=self.config.base_rate, seed=self.config.seed):
            return None
        return HeldReward("not_kept", sid)

    def _named(self, reward: RewardCreate) -> _Session | None:
        if reward.response_id is not None:
            return self._by_response.get(reward.response_id)
        sid = _named_session_id(reward)
        if sid is None:
            return None
        return self._open.get(sid) or self._held.get(sid) or self._writing.get(sid)

    # -- writing --------------------------------------------------------------------------------

    def _write_later(self, session: _Session) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._write(session))
        session.writing = task
        self._writing[session.session_id] = session
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        return task

    async def _write(self, session: _Session) -> None:
        """Write a kept session (``SessionWriter``) and count what happened."""
        closed = ClosedSession(
            session_id=session.session_id,
            attempt_id=session.attempt_id,
            exchanges=tuple(session.exchanges),
            shed_calls=session.shed_calls,
            kept_by="reward" if session.is_rescued else "sample",
            rewards=tuple(session.rewards),
            release=session.release,
            arm=session.arm,
        )
        try:
            if await self._writer.write(closed):
                self.counters.calls_recorded += len(closed.exchanges)
            else:
                self.counters.sessions_failed += 1
        finally:
            # Until now a reward for the session waited for this write; from now on the
            # store has the session (or never will).
            self._release_index(session)
            if self._writing.get(session.session_id) is session:
                del self._writing[session.session_id]

    def _release_index(self, session: _Session) -> None:
        for response_id in session.response_ids:
            if self._by_response.get(response_id) is session:
                del self._by_response[response_id]

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start closing idle sessions in the background (needs the serving event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sessions")

    async def _run(self) -> None:
        timeouts = (self.config.session.idle_timeout_s, self.config.buffer_ttl_s or 1.0)
        interval = min(1.0, max(0.05, min(timeouts) / 4))
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)
            await self.close_idle()

    async def aclose(self) -> None:
        """Close every open session (kept ones are written), drop held ones, finish writes."""
        for session in list(self._open.values()):
            self._close(session)
        for session in list(self._held.values()):
            self._drop_held(session)
        if self._task is not None:
            self._stop.set()
            await self._task
        if self._writes:
            _, late = await asyncio.wait(set(self._writes), timeout=self._close_timeout_s)
            for task in late:
                task.cancel()
            self.counters.sessions_failed += len(late)
            if late:
                _log.error("store unreachable at close: %d sessions not stored", len(late))
            await asyncio.gather(*late, return_exceptions=True)

    def status(self) -> dict[str, int]:
        """Return the counters, and the sessions open and held now (for ``/healthz``)."""
        counts = {k: v for k, v in vars(self.counters).items() if isinstance(v, int)}
        counts["sessions_open"] = len(self._open)
        counts["sessions_held"] = len(self._held)
        counts["buffered_bytes"] = self._buffered_bytes
        return counts


def _named_session_id(reward: RewardCreate) -> str | None:
    """Return the session a reward names by session id or by a ``session-`` rollout id."""
    rollout_id = reward.rollout_id
    if rollout_id is not None and rollout_id.startswith(SESSION_ROLLOUT_PREFIX):
        return rollout_id[len(SESSION_ROLLOUT_PREFIX) :]
    return reward.session_id


def _bucket(per_minute: float | None, clock: Callable[[], float]) -> TokenBucket | None:
    return TokenBucket(per_minute, clock=clock) if per_minute is not None else None


def _size(exchange: Exchange) -> int:
    """Bytes of JSON an exchange holds, roughly (request plus response)."""
    return len(orjson.dumps(exchange.request)) + len(orjson.dumps(exchange.response))
