"""A runner process against a sick store: it backs off through 5xx and stays alive.

The store is the real store service on 127.0.0.1, behind a pure-ASGI wrapper that answers
every request with the service's own 500 body while an outage lasts (the "edge of the world"
fake). The runner is the real ``fulmen runner`` command.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson

from fulmen.store import open_store
from fulmen.store.server import create_app
from fulmen.tracing import rewards_from_spans
from fulmen.types import RolloutCreate, RolloutStatus
from tests.agent.processes import runner, stop, wait_exit, wait_for
from tests.store.http_server import aserve_app

_INTERNAL_ERROR = orjson.dumps(
    {
        "error": "internal server error (see the server log)",
        "code": "internal_error",
        "detail": None,
    }
)


class SickFor:
    """ASGI wrapper: while ``is_sick``, answers 500 ``internal_error`` to every request but
    ``/v1/info`` (so the runner connects, and then each of its claims fails)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.is_sick = False
        self.refused = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.is_sick or scope["path"] == "/v1/info":
            await self.app(scope, receive, send)
            return
        self.refused += 1
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 500, "headers": headers})
        await send({"type": "http.response.body", "body": _INTERNAL_ERROR})


async def test_runner_backs_off_through_500s_on_claim_and_finishes_after(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'runs.db'}", watchdog_interval=0.2) as store:
        sick = SickFor(create_app(store))
        async with aserve_app(sick) as url:
            ids = [
                r.rollout_id
                for r in await store.enqueue([RolloutCreate(input={"x": i}) for i in range(4)])
            ]
            sick.is_sick = True  # every claim answers 500 from the start
            proc = runner(url, "async_sleepy", "--until-idle", log=tmp_path / "runner.log")
            try:
                outage_end = time.monotonic() + 6.0
                await wait_for(lambda: _after(outage_end), 30, "the outage")
                # Old runners gave up after the client's 3 retries (well under a second).
                assert proc.poll() is None, (tmp_path / "runner.log").read_text()
                assert sick.refused > 4
                sick.is_sick = False
                stats = await wait_exit(proc, 60)
            finally:
                stop(proc)
            assert (stats["claimed"], stats["succeeded"], stats["failed"]) == (4, 4, 0)
            for x, rollout_id in enumerate(ids):
                assert (await store.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED
                spans = (await store.query_spans(rollout_id)).items
                assert rewards_from_spans(spans) == {"reward": float(x)}
    log = (tmp_path / "runner.log").read_text()
    assert "claim failed" in log and "still retrying" in log
    assert "claim succeeded after" in log


async def test_runner_with_a_wrong_token_fails_loudly(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    async with (
        open_store(db, watchdog_interval=None) as store,
        aserve_app(create_app(store, token="right")) as url,
    ):
        await store.enqueue([RolloutCreate(input={"x": 0})])
        proc = runner(url, "async_sleepy", "--token", "wrong", log=tmp_path / "runner.log")
        try:
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            stop(proc)
    assert proc.returncode == 1  # a 4xx of its own: not retried
    assert "wrong bearer token" in (tmp_path / "runner.log").read_text()


async def _after(moment: float) -> bool:
    return time.monotonic() >= moment
