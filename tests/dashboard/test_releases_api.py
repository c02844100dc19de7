"""The releases routes over a real SQLite store holding releases known by construction
(``tests/dashboard/release_records.py``): the list, one release with the figures ``fulmen
release status --json`` prints for the same store, new sessions and late rewards seen by the
next request, a decision seen with its reason, unknown names 404 naming them and names that
cannot be one 422."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from fulmen.cli.main import main
from fulmen.dashboard.app import create_app
from fulmen.store import Store, open_store
from fulmen.types import RewardCreate, SessionCreate
from tests.dashboard.release_records import HOSTILE, KNOWN, MARKUP, fill_releases, promotion

T = TypeVar("T")


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await fill_releases(store)

    asyncio.run(fill())
    return url


def call(
    url: str, use: Callable[[httpx.AsyncClient, Store], Awaitable[T]], token: str | None = None
) -> T:
    """Run ``use`` with a client of the dashboard over the store at ``url`` (in-process)."""

    async def go() -> T:
        async with open_store(url, watchdog_interval=None) as store:
            transport = httpx.ASGITransport(app=create_app(store, token=token))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                return await use(c, store)

    return asyncio.run(go())


def get(url: str, path: str) -> httpx.Response:
    async def use(client: httpx.AsyncClient, store: Store) -> httpx.Response:
        del store
        return await client.get(path)

    return call(url, use)


def test_the_list_holds_every_release_latest_first(store_url: str) -> None:
    answer = get(store_url, "/api/releases")
    assert answer.status_code == 200
    known, hostile = answer.json()["items"]
    assert (known["name"], hostile["name"]) == (KNOWN, HOSTILE)
    assert known["state"] == "canary" and known["share"] == 0.1 and known["revision"] == 1
    assert known["incumbent"] == {"model": "gemma", "run_id": None, "version": None}
    assert known["candidate"] == {"model": "run-1-v3", "run_id": "run-1", "version": 3}
    assert known["created_at"] <= known["updated_at"]
    assert known["event_count"] == 1 and "events" not in known
    assert hostile["candidate"]["model"] == MARKUP  # data as stored; the page shows it as text
    assert hostile["event_count"] == 2 and hostile["revision"] == 2


def test_a_release_answers_what_the_cli_prints(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = get(store_url, f"/api/releases/{KNOWN}").json()
    assert main(["release", "status", KNOWN, "--store", store_url, "--json"]) == 0
    assert shown == json.loads(capsys.readouterr().out)
    inc, cand, test = shown["incumbent"], shown["candidate"], shown["comparison"]
    assert (inc["sessions"], inc["rewarded"], inc["mean"]) == (20, 20, 0.25)
    assert (cand["sessions"], cand["rewarded"], cand["mean"]) == (20, 20, 0.75)
    assert cand["ci_low"] < 0.75 < cand["ci_high"]
    assert test["difference"] == pytest.approx(0.5) and test["ratio"] == pytest.approx(3.0)
    assert test["p_value"] < 0.01
    assert [e["kind"] for e in shown["release"]["events"]] == ["created"]
    # too few rewards for a comparison; the window event keeps its reason as stored
    hostile = get(store_url, f"/api/releases/{HOSTILE}").json()
    assert hostile["comparison"] is None
    assert (hostile["candidate"]["sessions"], hostile["candidate"]["rewarded"]) == (2, 1)
    assert hostile["incumbent"] == {
        "sessions": 0,
        "rewarded": 0,
        "mean": None,
        "ci_low": None,
        "ci_high": None,
    }
    window = hostile["release"]["events"][1]
    assert window["figures"] == {"window": 0, "verdict": "waiting"}
    assert window["reason"] == f"waiting: {MARKUP}"


def test_new_sessions_late_rewards_and_decisions_show_on_the_next_request(store_url: str) -> None:
    async def use(client: httpx.AsyncClient, store: Store) -> list[Any]:
        first = (await client.get(f"/api/releases/{HOSTILE}")).json()
        # a late reward for h1 and a new incumbent session: the same app reads them next time
        await store.add_reward(RewardCreate.scalar(0.0, session_id="h1"))
        metadata = {"release": HOSTILE, "arm": "incumbent"}
        await store.record_session(
            SessionCreate(session_id="h2", attempt_id="h2", metadata=metadata)
        )
        second = (await client.get(f"/api/releases/{HOSTILE}")).json()
        await store.decide_release(KNOWN, promotion(f"looks good {MARKUP}"))
        decided = (await client.get(f"/api/releases/{KNOWN}")).json()
        listed = (await client.get("/api/releases")).json()["items"]
        return [first, second, decided, listed]

    first, second, decided, listed = call(store_url, use)
    assert first["candidate"]["rewarded"] == 1 and first["incumbent"]["sessions"] == 0
    assert second["candidate"]["rewarded"] == 2 and second["candidate"]["mean"] == 0.5
    assert second["incumbent"]["sessions"] == 1 and second["incumbent"]["rewarded"] == 0
    assert decided["release"]["state"] == "promoted" and decided["release"]["revision"] == 2
    promoted = decided["release"]["events"][-1]
    assert (promoted["kind"], promoted["by"]) == ("promoted", "cli")
    assert promoted["reason"] == f"looks good {MARKUP}"
    assert decided["candidate"]["mean"] == 0.75  # the figures stay the sessions'
    assert listed[0]["state"] == "promoted"


@pytest.mark.parametrize(
    ("path", "status", "named"),
    [
        ("/api/releases/nope", 404, "release 'nope' does not exist"),
        ("/api/releases/a%2Fb", 404, "release 'a/b' does not exist"),
        ("/api/releases/" + "x" * 200, 422, "xxxx"),
        ("/api/releases/bad%00name", 422, "'bad\\x00name'"),
        ("/api/releases/", 422, "not a release name"),
    ],
)
def test_names_that_are_not_a_release_are_refused_by_name(
    store_url: str, path: str, status: int, named: str
) -> None:
    answer = get(store_url, path)
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert named in body["error"] and "Traceback" not in answer.text
    assert body["code"] == ("not_found" if status == 404 else "invalid_request")


def test_the_routes_need_the_token_when_there_is_one(store_url: str) -> None:
    async def use(client: httpx.AsyncClient, store: Store) -> list[int]:
        del store
        bare = await client.get("/api/releases")
        one = await client.get(f"/api/releases/{KNOWN}")
        good = await client.get("/api/releases", headers={"authorization": "Bearer t0k"})
        return [bare.status_code, one.status_code, good.status_code]

    assert call(store_url, use, token="t0k") == [401, 401, 200]
