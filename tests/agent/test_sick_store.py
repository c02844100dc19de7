"""A runner process against a sick store: it backs off through 5xx and stays alive, and the
spans it cannot store go to a spill file in ``$FULMEN_SPILL_DIR`` and come back exactly once.

The store is the real store service on 127.0.0.1, behind a pure-ASGI wrapper that answers
every request with the service's own 500 body while an outage lasts (the "edge of the world"
fake). The runner is the real ``fulmen runner`` command.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from fulmen.store import open_store
from fulmen.store.server import create_app
from fulmen.tracing import rewards_from_spans
from fulmen.types import RolloutCreate, RolloutStatus
from tests.agent.processes import REPO, runner, stop, wait_exit, wait_for
from tests.store.http_server import aserve_app

_INTERNAL_ERROR = orjson.dumps(
    {
        "error": "internal server error (see the server log)",
        "code": "internal_error",
        "detail": None,
    }
)


class SickFor:
    """ASGI wrapper: while ``is_sick``, answers 500 ``internal_error`` to the requests whose
    path starts with ``prefix`` (default: all but ``/v1/info``, so the runner connects and
    then each of its claims fails)."""

    def __init__(self, app: Any, prefix: str = "/") -> None:
        self.app = app
        self.prefix = prefix
        self.is_sick = False
        self.refused = 0

    def _is_refused(self, scope: Any) -> bool:
        path = scope["path"]
        return self.is_sick and path != "/v1/info" and path.startswith(self.prefix)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self._is_refused(scope):
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


async def test_spans_spill_to_the_spill_dir_while_the_store_refuses_them(tmp_path: Path) -> None:
    spill_dir = tmp_path / "spill"
    async with open_store(f"sqlite:///{tmp_path / 'runs.db'}", watchdog_interval=None) as store:
        sick = SickFor(create_app(store), prefix="/v1/spans")
        async with aserve_app(sick) as url:
            ids = [
                r.rollout_id
                for r in await store.enqueue(
                    [RolloutCreate(input={"x": i, "sleep": 0.01}) for i in range(12)]
                )
            ]
            sick.is_sick = True
            proc = runner_with_env(
                url, {"FULMEN_SPILL_DIR": str(spill_dir)}, log=tmp_path / "runner.log"
            )
            try:
                # 12 rollouts x 3 spans against a memory bound of 4 spans: most go to the file
                await wait_for(lambda: _has_spilled(spill_dir), 60, "a spill file")
                await asyncio.sleep(1.0)
                assert proc.poll() is None
                sick.is_sick = False
                stats = await wait_exit(proc, 120)
            finally:
                stop(proc)
            assert (stats["succeeded"], stats["failed"]) == (12, 0)
            for x, rollout_id in enumerate(ids):
                spans = (await store.query_spans(rollout_id)).items
                assert sorted(s.name for s in spans) == ["fulmen.reward", "fulmen.rollout", "work"]
                assert rewards_from_spans(spans) == {"reward": float(x)}  # each exactly once
    assert list(spill_dir.iterdir()) == []  # replayed and deleted


def runner_with_env(url: str, extra_env: dict[str, str], *, log: Path) -> subprocess.Popen[bytes]:
    """``fulmen runner`` with a span memory bound of 4 and ``extra_env`` in its environment."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **extra_env}
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "fulmen", "runner", "--store", url,
             "--agent", "tests.agent.sample_agents:async_sleepy", "--concurrency", "4",
             "--span-buffer-max", "4", "--store-retry-max-delay", "0.5",
             "--heartbeat-interval", "0.2", "--poll-interval", "0.05", "--until-idle"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, start_new_session=True,
        )  # fmt: skip


async def _has_spilled(directory: Path) -> bool:
    return directory.is_dir() and any(
        f.stat().st_size > 0 for f in directory.iterdir() if f.suffix == ".jsonl"
    )
