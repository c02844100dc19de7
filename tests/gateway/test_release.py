"""Canary releases through a real gateway: the split, the arm on every record, the switch.

A real HTTP gateway on 127.0.0.1 in front of the scripted upstream (which answers with the
model name it was asked for, so a reply tells which arm served it), writing to a real SQLite
store. Session timeouts move on a clock the tests hold.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from fulmen.errors import ConfigError
from fulmen.gateway import GatewayConfig, create_app
from fulmen.gateway.capture_config import CaptureConfig, SessionKeyConfig
from fulmen.gateway.release import ReleaseRouter
from fulmen.gateway.release_config import ReleaseConfig
from fulmen.gateway.sampling import is_sampled
from fulmen.store import open_store
from fulmen.types import Mode, RolloutQuery
from fulmen.types.releases import ReleaseArm, ReleaseDecision, ReleaseState
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app
from tests.gateway.test_production import Clock, idle_out

INCUMBENT, CANDIDATE = "base-model", "run-1-v3"


def release(share: float = 0.1, **kw: Any) -> ReleaseConfig:
    fields = {"name": "rel", "incumbent": INCUMBENT, "candidate": CANDIDATE, "share": share}
    return ReleaseConfig.model_validate({**fields, "poll_s": 0.05, **kw})


def capture() -> CaptureConfig:
    return CaptureConfig(session=SessionKeyConfig(header="x-session-id", idle_timeout_s=60))


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[Any]:
    store = await open_store(f"sqlite:///{tmp_path / 'release.db'}", watchdog_interval=None)
    yield store
    await store.aclose()


@asynccontextmanager
async def serving(store: Any, config: ReleaseConfig, clock: Clock) -> AsyncIterator[Running]:
    script = Script()
    gateway_config = GatewayConfig(
        flush_interval_s=0.01, connect_retries=0, capture=capture(), release=config
    )
    async with serve_app(create_upstream_app(script)) as upstream_root:
        app = create_app(store, [f"{upstream_root}/v1"], config=gateway_config, clock=clock)
        async with serve_app(app) as url:
            yield Running(url, app.state.gateway, store, script)


async def ask(client: httpx.AsyncClient, url: str, session: str, **extra: Any) -> str:
    """Make one call in ``session``; return the model that answered it."""
    body = {"model": "whatever-the-agent-says", "messages": [{"role": "user", "content": "hi"}]}
    reply = await client.post(
        f"{url}/v1/chat/completions", json={**body, **extra}, headers={"x-session-id": session}
    )
    assert reply.status_code == 200, reply.text
    if extra.get("stream"):
        return reply.text.split('"model":"', 1)[1].split('"', 1)[0]
    return reply.json()["model"]


def test_the_split_holds_its_share_and_never_moves_a_session() -> None:
    """4000 sessions at 10%: the candidate's count lies within 4 binomial SDs of 400."""
    router = ReleaseRouter(release(0.1), store=None)  # type: ignore[arg-type]
    ids = [f"user-{i}" for i in range(4000)]
    arms = [router.arm_of(i) for i in ids]
    candidates = arms.count(ReleaseArm.CANDIDATE)
    sd = math.sqrt(4000 * 0.1 * 0.9)
    assert abs(candidates - 400) < 4 * sd, candidates
    assert [router.arm_of(i) for i in ids] == arms  # asked again: the same arm
    # Independent of capture's sampling hash: the kept half holds the same share.
    kept = [a for i, a in zip(ids, arms, strict=True) if is_sampled(i, base_rate=0.5, seed=0)]
    share = kept.count(ReleaseArm.CANDIDATE) / len(kept)
    assert abs(share - 0.1) < 4 * math.sqrt(0.1 * 0.9 / len(kept)), share
    # Another seed splits otherwise; shares 0 and 1 send every session to one arm.
    other = ReleaseRouter(release(0.1, seed=7), store=None)  # type: ignore[arg-type]
    assert [other.arm_of(i) for i in ids] != arms
    none = ReleaseRouter(release(0.0), store=None)  # type: ignore[arg-type]
    every = ReleaseRouter(release(1.0), store=None)  # type: ignore[arg-type]
    assert {none.arm_of(i) for i in ids[:200]} == {ReleaseArm.INCUMBENT}
    assert {every.arm_of(i) for i in ids[:200]} == {ReleaseArm.CANDIDATE}


async def test_sessions_keep_their_arm_and_every_record_names_it(sqlite: Any) -> None:
    clock = Clock()
    async with serving(sqlite, release(0.3), clock) as gw, httpx.AsyncClient(timeout=30) as client:
        seen: dict[str, set[str]] = {}
        for turn in range(2):
            for i in range(60):
                session = f"s{i}"
                model = await ask(client, gw.url, session, stream=turn == 1 and i % 2 == 0)
                seen.setdefault(session, set()).add(model)
        assert all(len(models) == 1 for models in seen.values())  # no session switched arm
        served = Counter(next(iter(m)) for m in seen.values())
        assert served[CANDIDATE] + served[INCUMBENT] == 60 and served[CANDIDATE] > 0
        router = gw.gateway.release
        assert router is not None
        for session, models in seen.items():
            expected = router.model_of(router.arm_of(session))
            assert models == {expected}
        await idle_out(gw, clock, 61)
        rollouts = (await sqlite.query_rollouts(RolloutQuery(mode=Mode.PRODUCTION))).items
        assert len(rollouts) == 60
        for rollout in rollouts:
            arm = rollout.metadata["arm"]
            assert rollout.metadata["release"] == "rel"
            calls = (await sqlite.query_llm_calls(rollout.rollout_id)).items
            assert [(c.release, c.arm) for c in calls] == [("rel", arm)] * 2
            assert {c.model for c in calls} == {router.model_of(ReleaseArm(arm))}
        # The store holds the release; /healthz and /metrics show its arms.
        stored = await sqlite.get_release("rel")
        assert (stored.state, stored.candidate.model) == (ReleaseState.CANARY, CANDIDATE)
        health = (await client.get(f"{gw.url}/healthz")).json()["release"]
        assert health["calls"] == {
            "incumbent": 2 * served[INCUMBENT],
            "candidate": 2 * served[CANDIDATE],
        }
        metrics = (await client.get(f"{gw.url}/metrics")).text
        line = 'fulmen_gateway_release_sessions_total{arm="candidate",release="rel"}'
        assert f"{line} {float(served[CANDIDATE])}" in metrics
        assert 'fulmen_gateway_release_state{release="rel",state="canary"} 1.0' in metrics


async def test_promote_and_rollback_under_load_lose_no_request(sqlite: Any) -> None:
    """Calls keep flowing while the release is promoted, then rolled back: none fails."""
    clock = Clock()
    async with serving(sqlite, release(0.5), clock) as gw, httpx.AsyncClient(timeout=30) as client:
        router = gw.gateway.release
        assert router is not None
        # Each user's first session is answered while the release is a canary: both arms.
        assert {router.arm_of(f"u{k}-0") for k in range(8)} == set(ReleaseArm)
        # (state before the call was sent, model that answered, state once it was answered)
        answered: list[tuple[str, str, str]] = []
        stop = asyncio.Event()

        async def user(k: int) -> None:
            rng = random.Random(k)
            n = 0
            while not stop.is_set():
                session = f"u{k}-{n // 3}"  # three calls a session
                before = router.state.value
                model = await ask(client, gw.url, session, stream=rng.random() < 0.5)
                answered.append((before, model, router.state.value))
                n += 1

        users = [asyncio.create_task(user(k)) for k in range(8)]

        async def until(state: ReleaseState) -> None:
            while router.state is not state:
                await asyncio.sleep(0.01)

        async def answers_in(state: ReleaseState, count: int) -> None:
            """Wait until ``count`` calls were sent and answered in ``state`` alone."""
            while sum(b == a == state.value for b, _, a in answered) < count:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(answers_in(ReleaseState.CANARY, 40), 30)
        await sqlite.decide_release("rel", ReleaseDecision(event_id="p", kind="promoted", by="t"))
        await asyncio.wait_for(until(ReleaseState.PROMOTED), 30)  # only a bound on a hang
        await asyncio.wait_for(answers_in(ReleaseState.PROMOTED, 40), 30)
        rollback = ReleaseDecision(event_id="r", kind="rolled_back", by="t")
        await sqlite.decide_release("rel", rollback)
        await asyncio.wait_for(until(ReleaseState.ROLLED_BACK), 30)
        await asyncio.wait_for(answers_in(ReleaseState.ROLLED_BACK, 40), 30)
        stop.set()
        await asyncio.gather(*users)  # a failed call would have raised here
        assert len(gw.script.requests) == len(answered)  # every call sent was answered
        models: dict[str, set[str]] = {}
        for before, model, after in answered:
            if before == after:  # routed and answered in one state
                models.setdefault(before, set()).add(model)
        assert models == {
            "canary": {INCUMBENT, CANDIDATE},
            "promoted": {CANDIDATE},
            "rolled_back": {INCUMBENT},
        }


async def test_a_release_that_cannot_be_served_is_refused_loudly(sqlite: Any) -> None:
    with pytest.raises(ValidationError, match="release: needs capture"):
        GatewayConfig(release=release())
    with pytest.raises(ValidationError, match="different models"):
        release(candidate=INCUMBENT)
    with pytest.raises(ValidationError):
        release(share=float("nan"))
    # A model version the store does not have, and another definition under a stored name.
    missing = release(candidate={"run_id": "no-run", "version": 2})
    assert missing.candidate.model == "no-run-v2"
    router = ReleaseRouter(missing, sqlite, engines=["http://127.0.0.1:9/v1"])
    router.start()
    with pytest.raises(ConfigError, match="no model version 2"):
        await router.ready(10)
    await router.aclose()
    await sqlite.put_release(release(0.5).definition())
    other = ReleaseRouter(release(0.1), sqlite)
    other.start()
    with pytest.raises(ConfigError, match="another definition"):
        await other.ready(10)
    await other.aclose()
