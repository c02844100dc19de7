"""Several engines: calls of one rollout stick to one engine; a dead engine is skipped."""

from __future__ import annotations

import asyncio
import itertools
import re

import httpx
import orjson

from fulmen.gateway import GatewayConfig, Upstream, UpstreamPool, create_app
from tests.gateway.conftest import SpyStore, new_attempt
from tests.gateway.scripted_upstream import Script, create_upstream_app, free_socket, serve_app

CHAT = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}


def test_rollout_affinity_is_stable_and_spreads() -> None:
    pool = UpstreamPool([Upstream(base_url=f"http://127.0.0.1:{9000 + i}") for i in range(3)])
    firsts = {pool.ranked(f"ro-{i}")[0].base_url for i in range(60)}
    assert len(firsts) == 3
    assert all(pool.ranked("ro-1")[0] == pool.ranked("ro-1")[0] for _ in range(5))


def test_removing_an_engine_moves_only_its_rollouts() -> None:
    engines = [Upstream(base_url=f"http://127.0.0.1:{9000 + i}") for i in range(3)]
    before = UpstreamPool(engines)
    after = UpstreamPool(engines[:2])
    for i in range(100):
        first = before.ranked(f"ro-{i}")[0]
        if first != engines[2]:
            assert after.ranked(f"ro-{i}")[0] == first


def test_untracked_calls_go_to_the_least_loaded_engine() -> None:
    a, b = Upstream(base_url="http://127.0.0.1:9001"), Upstream(base_url="http://127.0.0.1:9002")
    pool = UpstreamPool([a, b])
    pool.acquire(a)
    assert pool.ranked(None)[0] == b
    pool.acquire(b)
    pool.acquire(b)
    assert pool.ranked(None)[0] == a


def test_an_engine_that_refused_is_ranked_last_for_a_while() -> None:
    now = itertools.count()
    a, b = Upstream(base_url="http://127.0.0.1:9001"), Upstream(base_url="http://127.0.0.1:9002")
    pool = UpstreamPool([a, b], unhealthy_s=5, clock=lambda: float(next(now)))
    rollout = next(f"ro-{i}" for i in range(100) if pool.ranked(f"ro-{i}")[0] == a)
    pool.mark_down(a)  # down until t=5 (clock reads 0 here)
    assert pool.ranked(rollout)[0] == b
    for _ in range(6):
        pool.ranked(rollout)
    assert pool.ranked(rollout)[0] == a


async def test_calls_of_a_rollout_stick_to_one_engine(
    store: SpyStore, config: GatewayConfig
) -> None:
    s1, s2 = Script(), Script()
    async with (
        serve_app(create_upstream_app(s1)) as u1,
        serve_app(create_upstream_app(s2)) as u2,
    ):
        app = create_app(store, [f"{u1}/v1", f"{u2}/v1"], config=config)
        async with serve_app(app) as url, httpx.AsyncClient() as client:
            # Rollout ids are random: with 8 of them, all hash to one engine 1 time in 128. Draw
            # ids until each engine is first for three, so the spread asserted below is certain.
            pool, attempts = app.state.gateway.pool, []
            per_engine = dict.fromkeys((u.base_url for u in pool.upstreams), 0)
            while min(per_engine.values()) < 3:
                attempts.append(attempt := await new_attempt(store))
                per_engine[pool.ranked(attempt[0])[0].base_url] += 1
            for r_id, a_id in attempts * 3:
                path = f"{url}/rollout/{r_id}/attempt/{a_id}/v1/chat/completions"
                body = {**CHAT, "messages": [{"role": "user", "content": r_id}]}
                assert (await client.post(path, json=body)).status_code == 200
            await app.state.gateway.flush()
    seen = {
        engine: {r["messages"][0]["content"] for r in script.requests}
        for engine, script in (("1", s1), ("2", s2))
    }
    assert seen["1"] and seen["2"], "both engines should get some rollouts"
    assert not seen["1"] & seen["2"], "a rollout's calls went to two engines"
    for r_id, _ in attempts:
        upstreams = {c.upstream for c in (await store.query_llm_calls(r_id)).items}
        assert len(upstreams) == 1


async def test_dead_engine_is_skipped(store: SpyStore, config: GatewayConfig) -> None:
    dead = free_socket()
    script = Script()
    try:
        async with serve_app(create_upstream_app(script)) as live:
            engines = [f"http://127.0.0.1:{dead.getsockname()[1]}/v1", f"{live}/v1"]
            app = create_app(store, engines, config=config)
            async with serve_app(app) as url, httpx.AsyncClient() as client:
                attempts = [await new_attempt(store) for _ in range(6)]
                for r_id, a_id in attempts:
                    path = f"{url}/rollout/{r_id}/attempt/{a_id}/v1/chat/completions"
                    assert (await client.post(path, json=CHAT)).status_code == 200
                await app.state.gateway.flush()
    finally:
        dead.close()
    assert len(script.requests) == 6
    assert all(c.error is None for c in store.added)


async def test_connection_closed_by_an_idle_engine_is_resent_once(
    store: SpyStore, config: GatewayConfig
) -> None:
    """An engine that drops a reused keep-alive connection without answering (its idle
    timeout racing our reuse) costs the agent nothing: the request goes out again."""
    received: list[int] = []  # connection number of every request read

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = len({*received}) + 1
        try:
            for served in itertools.count():
                head = await reader.readuntil(b"\r\n\r\n")
                match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                await reader.readexactly(int(match.group(1)) if match else 0)
                received.append(number)
                if served == 1:  # the second request on this connection: hang up silently
                    return
                body = orjson.dumps(
                    {"id": "x", "object": "chat.completion", "model": "m",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                  "finish_reason": "stop"}]}
                )  # fmt: skip
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reuse = config.model_copy(update={"keepalive_s": 60.0})
    app = create_app(store, [f"http://127.0.0.1:{port}/v1"], config=reuse)
    try:
        async with serve_app(app) as url, httpx.AsyncClient() as client:
            for _ in range(2):
                r = await client.post(f"{url}/v1/chat/completions", json=CHAT)
                assert r.status_code == 200, r.text
    finally:
        server.close()
        await server.wait_closed()
    assert received == [1, 1, 2]  # second call: dropped on the reused connection, then resent
