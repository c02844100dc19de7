"""Production capture through a real gateway: sessions, sampling, rewards, rate limits.

A real HTTP gateway on 127.0.0.1 in front of the scripted upstream, writing to a real SQLite
store. Time is a clock the tests move (``create_app(clock=...)``), never a sleep.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fulmen.errors import NotFound
from fulmen.gateway import GatewayConfig, create_app
from fulmen.gateway.capture import Exchange
from fulmen.gateway.capture_config import CaptureConfig, SessionKeyConfig
from fulmen.gateway.recorder import CallRecorder
from fulmen.gateway.sampling import is_sampled
from fulmen.gateway.sessions import SessionCapture
from fulmen.store import open_store
from fulmen.transitions.trajectory import load_attempt
from fulmen.types import Mode, RewardCreate, RolloutQuery, RolloutStatus
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app


class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[Any]:
    store = await open_store(f"sqlite:///{tmp_path / 'prod.db'}", watchdog_interval=None)
    yield store
    await store.aclose()


@asynccontextmanager
async def production(
    store: Any, capture: CaptureConfig, clock: Clock, script: Script | None = None
) -> AsyncIterator[Running]:
    """A scripted upstream and a gateway with ``capture`` in front of it."""
    script = script or Script()
    config = GatewayConfig(
        flush_interval_s=0.01, connect_retries=0, read_timeout_s=5.0, capture=capture
    )
    async with serve_app(create_upstream_app(script)) as upstream_root:
        app = create_app(store, [f"{upstream_root}/v1"], config=config, clock=clock)
        async with serve_app(app) as url:
            yield Running(url, app.state.gateway, store, script)


def by_header(idle_timeout_s: float = 60.0) -> SessionKeyConfig:
    return SessionKeyConfig(header="x-session-id", idle_timeout_s=idle_timeout_s)


async def idle_out(gw: Running, clock: Clock, seconds: float) -> None:
    """Move time on, run the gateway's idle pass, and wait until what it closed is stored."""
    clock.now += seconds
    capture = gw.gateway.capture
    assert capture is not None
    await capture.close_idle()
    await wait_for_writes(capture)
    await gw.gateway.flush()


async def wait_for_writes(capture: SessionCapture) -> None:
    writes = set(capture._writes)  # pyright: ignore[reportPrivateUsage]
    if writes:
        await asyncio.gather(*writes)


async def test_an_idle_session_becomes_a_finished_production_rollout_with_all_its_calls(
    sqlite: Any,
) -> None:
    clock = Clock()
    capture = CaptureConfig(session=by_header(idle_timeout_s=60))
    async with production(sqlite, capture, clock) as gw, httpx.AsyncClient(timeout=60) as client:
        ids = []
        for i in range(3):
            reply = await client.post(
                f"{gw.url}/v1/chat/completions",
                json=chat(f"turn {i}"),
                headers={"x-session-id": "conv-1"},
            )
            assert reply.status_code == 200
            ids.append(reply.json()["id"])
            clock.now += 30  # under the idle timeout: the session stays open
        alone = await client.post(f"{gw.url}/v1/chat/completions", json=chat("no session"))
        await gw.gateway.flush()
        with pytest.raises(NotFound):
            await sqlite.get_rollout("session-conv-1")  # still open

        await idle_out(gw, clock, 61)
        rollout = await sqlite.get_rollout("session-conv-1")
        assert rollout.mode is Mode.PRODUCTION and rollout.status is RolloutStatus.SUCCEEDED
        assert rollout.metadata["calls"] == 3 and rollout.metadata["kept_by"] == "sample"
        read = await load_attempt(sqlite, "session-conv-1")
        assert [c.response_id for c in read.calls] == ids
        assert all(c.is_token_level and c.attempt_id == read.attempt_id for c in read.calls)
        # A call with no session id is a session of its own, closed at once.
        (own,) = [
            r
            for r in (await sqlite.query_rollouts(RolloutQuery(mode=Mode.PRODUCTION))).items
            if r.rollout_id != "session-conv-1"
        ]
        own_calls = (await sqlite.query_llm_calls(own.rollout_id)).items
        assert [c.response_id for c in own_calls] == [alone.json()["id"]]
        # The same id after the session closed: a new attempt of the same rollout.
        await client.post(
            f"{gw.url}/v1/chat/completions", json=chat("back"), headers={"x-session-id": "conv-1"}
        )
        await idle_out(gw, clock, 61)
        attempts = await sqlite.list_attempts("session-conv-1")
        assert [a.number for a in attempts] == [1, 2]
        status = (await client.get(f"{gw.url}/healthz")).json()["capture"]
        assert status["sessions_kept"] == 3 and status["sessions_open"] == 0


async def test_open_sessions_are_written_when_the_gateway_stops(sqlite: Any) -> None:
    clock = Clock()
    capture = CaptureConfig(session=SessionKeyConfig(body_field="user", idle_timeout_s=600))
    async with production(sqlite, capture, clock) as gw, httpx.AsyncClient(timeout=60) as client:
        for text in ("a", "b"):
            reply = await client.post(
                f"{gw.url}/v1/chat/completions", json=chat(text, user="user-9")
            )
            assert reply.status_code == 200
    # The servers are stopped: the open session was closed and written on the way out.
    read = await load_attempt(sqlite, "session-user-9")
    assert len(read.calls) == 2


async def test_sampling_keeps_base_rate_of_2000_sessions_within_binomial_error(
    sqlite: Any,
) -> None:
    clock = Clock()
    config = CaptureConfig(session=by_header(), base_rate=0.1, seed=7)
    recorder = CallRecorder(sqlite, flush_interval_s=0.01)
    recorder.start()
    capture = SessionCapture(config, store=sqlite, recorder=recorder, clock=clock)
    n, calls_per_session = 2000, 3
    for k in range(calls_per_session):
        for i in range(n):
            capture.add(_exchange(f"c-{i}-{k}"), f"s-{i}")
    clock.now += 61
    await capture.close_idle()
    await wait_for_writes(capture)
    await recorder.aclose()
    kept = capture.counters.sessions_kept
    sd = math.sqrt(n * 0.1 * 0.9)
    assert abs(kept - 200) < 4 * sd, kept
    assert capture.counters.sessions_sampled_out == n - kept
    stored = (await sqlite.query_rollouts(RolloutQuery(mode=Mode.PRODUCTION, limit=1000))).items
    assert len(stored) == kept
    for rollout in stored[:50]:  # a kept session is kept whole
        assert len((await sqlite.query_llm_calls(rollout.rollout_id)).items) == calls_per_session
    # The decision is the seed's and the id's alone: another gateway keeps the same sessions.
    again = {f"s-{i}" for i in range(n) if is_sampled(f"s-{i}", base_rate=0.1, seed=7)}
    assert again == {r.rollout_id.removeprefix("session-") for r in stored}


def _exchange(call_id: str) -> Exchange:
    return Exchange(
        call_id=call_id,
        rollout_id=None,
        attempt_id=None,
        endpoint="chat/completions",
        request=chat("x"),
        response={"id": f"chatcmpl-{call_id}", "choices": []},
        upstream=None,
        is_stream=False,
        started_at=1.0,
        latency_s=0.01,
    )


async def test_every_unsampled_session_whose_reward_crosses_the_threshold_is_kept(
    sqlite: Any,
) -> None:
    clock = Clock()
    capture = CaptureConfig(
        session=by_header(idle_timeout_s=60),
        base_rate=0.0,
        keep_if_reward_at_least=0.5,
        buffer_ttl_s=3600,
    )
    async with production(sqlite, capture, clock) as gw, httpx.AsyncClient(timeout=60) as client:
        response_ids: dict[int, str] = {}
        for i in range(10):
            for turn in range(2):
                reply = await client.post(
                    f"{gw.url}/v1/chat/completions",
                    json=chat(f"s{i} t{turn}"),
                    headers={"x-session-id": f"s{i}"},
                )
                response_ids[i] = reply.json()["id"]
        # A reward while session 9 is still open is held with it, and keeps it.
        held = await client.post(
            f"{gw.url}/v1/rewards", json={"session_id": "s9", "values": {"reward": 0.9}}
        )
        assert held.status_code == 202 and held.json()["status"] == "held"
        await idle_out(gw, clock, 61)
        assert gw.gateway.capture is not None
        counters = gw.gateway.capture.counters
        assert counters.sessions_buffered == 10 and counters.sessions_rescued == 1
        assert counters.sessions_sampled_out == 10

        # Rewards arrive later (half by session id, half by a response id), 0.0 to 0.8.
        for i in range(9):
            target = {"session_id": f"s{i}"} if i % 2 else {"response_id": response_ids[i]}
            posted = await client.post(
                f"{gw.url}/v1/rewards", json={**target, "values": {"reward": i / 10}}
            )
            if i >= 5:
                assert posted.status_code == 200, posted.text
                assert posted.json()["rollout_id"] == f"session-s{i}"
            else:
                assert posted.status_code == 202 and posted.json()["status"] == "held"
        await wait_for_writes(gw.gateway.capture)
        await gw.gateway.flush()
        kept = {r.rollout_id for r in (await sqlite.query_rollouts(RolloutQuery())).items}
        assert kept == {f"session-s{i}" for i in (5, 6, 7, 8, 9)}
        for i in (5, 6, 7, 8, 9):
            read = await load_attempt(sqlite, f"session-s{i}")
            assert len(read.calls) == 2 and read.final_reward == i / 10
            assert (await sqlite.get_rollout(f"session-s{i}")).metadata["kept_by"] == "reward"

        # The rest are dropped when their time is up; a reward after that is not an error.
        await idle_out(gw, clock, 3601)
        assert counters.sessions_rescued == 5 and counters.sessions_dropped_from_buffer == 5
        late = await client.post(
            f"{gw.url}/v1/rewards", json={"session_id": "s1", "values": {"reward": 1.0}}
        )
        assert late.status_code == 202 and late.json()["status"] == "not_kept"


async def test_a_burst_over_the_rate_limit_is_proxied_in_full_and_only_recording_is_shed(
    sqlite: Any,
) -> None:
    clock = Clock()  # frozen during the burst: the bucket does not refill
    capture = CaptureConfig(session=by_header(), max_calls_per_minute=5)
    async with production(sqlite, capture, clock) as gw, httpx.AsyncClient(timeout=60) as client:
        replies = await asyncio.gather(
            *(
                client.post(
                    f"{gw.url}/v1/chat/completions",
                    json=chat(f"burst {i}"),
                    headers={"x-session-id": "hot"},
                )
                for i in range(40)
            )
        )
        assert [r.status_code for r in replies] == [200] * 40
        assert len(gw.script.requests) == 40
        status = (await client.get(f"{gw.url}/healthz")).json()["capture"]
        assert status["calls_shed"] == 35
        await idle_out(gw, clock, 61)
        read = await load_attempt(sqlite, "session-hot")
        assert len(read.calls) == 5
        assert (await sqlite.get_rollout("session-hot")).metadata["shed_calls"] == 35


def test_the_span_budget_counts_a_new_sessions_rollout() -> None:
    clock = Clock()
    config = CaptureConfig(session=by_header(), max_spans_per_minute=6)
    capture = SessionCapture(config, store=None, recorder=None, clock=clock)  # type: ignore[arg-type]
    for i in range(8):
        capture.add(_exchange(f"c{i}"), "one")
    # 2 spans for the first call (its rollout too), 1 for each next: 5 calls fit in 6.
    assert capture.counters.calls_shed == 3
    clock.now += 10  # a sixth of a minute refills one span
    capture.add(_exchange("c-late"), "one")
    assert capture.counters.calls_shed == 3


async def test_the_buffer_drops_the_oldest_unsampled_sessions_when_full() -> None:
    clock = Clock()
    config = CaptureConfig(
        session=by_header(), base_rate=0.0, keep_if_reward_at_least=0.5, buffer_max_sessions=3
    )
    capture = SessionCapture(config, store=None, recorder=None, clock=clock)  # type: ignore[arg-type]
    for i in range(5):
        capture.add(_exchange(f"c{i}"), f"s{i}")
        clock.now += 1
    assert capture.counters.sessions_buffered == 5
    assert capture.counters.sessions_dropped_from_buffer == 2
    assert capture.status()["sessions_open"] == 5  # still open, but s0 and s1 hold nothing
    first = await capture.before_reward(RewardCreate.scalar(0.9, session_id="s0"))
    assert first is not None and first.status == "not_kept"
    newest = await capture.before_reward(RewardCreate.scalar(0.9, session_id="s4"))
    assert newest is not None and newest.status == "held"
    assert capture.counters.sessions_rescued == 1

    two = capture.status()["buffered_bytes"]  # s2 and s3, one call each
    tight = config.model_copy(update={"buffer_max_bytes": two, "buffer_max_sessions": 99})
    small = SessionCapture(tight, store=None, recorder=None, clock=clock)  # type: ignore[arg-type]
    for i in range(6):
        small.add(_exchange(f"c{i}"), f"t{i}")
    assert small.status()["buffered_bytes"] == two
    assert small.counters.sessions_dropped_from_buffer == 4


class GatedStore:
    """A real store whose ``record_session`` waits until the test opens the gate."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = asyncio.Event()

    async def record_session(self, session: Any) -> Any:
        await self.gate.wait()
        return await self.inner.record_session(session)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_reward_that_arrives_while_its_session_is_being_written_waits_for_it(
    sqlite: Any,
) -> None:
    clock = Clock()
    store = GatedStore(sqlite)
    recorder = CallRecorder(sqlite, flush_interval_s=0.01)
    recorder.start()
    capture = SessionCapture(
        CaptureConfig(session=by_header()), store=store, recorder=recorder, clock=clock
    )  # type: ignore[arg-type]
    capture.add(_exchange("w1"), "w")
    capture.add(_exchange("w2"), "w")
    clock.now += 61
    await capture.close_idle()  # the write starts and waits at the gate
    by_response = RewardCreate.scalar(0.5, response_id="chatcmpl-w2")
    waiting = asyncio.ensure_future(capture.before_reward(by_response))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    store.gate.set()
    assert await waiting is None  # now in the store: the route posts it there
    await recorder.flush()
    stored = await sqlite.add_reward(by_response)
    assert stored.rollout_id == "session-w"
    assert (await load_attempt(sqlite, "session-w")).final_reward == 0.5
    await capture.aclose()
    await recorder.aclose()


def test_the_session_id_is_read_from_the_configured_place() -> None:
    body = {"user": "u-1", "metadata": {"conversation": "c-9"}, "messages": []}
    headers = {"x-session-id": "h-7"}
    assert by_header().session_id_of(headers, body) == "h-7"
    assert SessionKeyConfig(body_field="user").session_id_of(headers, body) == "u-1"
    assert SessionKeyConfig(metadata_key="conversation").session_id_of(headers, body) == "c-9"
    assert SessionKeyConfig(body_field="messages").session_id_of(headers, body) is None
    assert by_header().session_id_of({"x-session-id": ""}, body) is None
    long = by_header().session_id_of({"x-session-id": "x" * 500}, body)
    assert long is not None and long.startswith("h-") and len(long) == 34
    assert long == by_header().session_id_of({"x-session-id": "x" * 500}, {})
