"""`fulmen dev --store` keeps the dry run's rollouts, calls and rewards in a store to read later.

The plain ``openai`` client talks through the real gateway to the scripted token-level server on
127.0.0.1; the store is a real SQLite file, named by a bare path or a ``sqlite:///`` URL, and is
read back with ``fulmen rollouts list``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections import deque
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.store.reading import read_llm_calls
from fulmen.types import RolloutQuery, RolloutStatus
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app
from tests.trainer.test_dev_length_warning import write_project


async def _dev(tmp_path: Path, store: str) -> str:
    config = write_project(tmp_path, max_seq_len=4096)
    script = Script(replies=deque([Reply(content="A gateway records every call.")]))
    out = io.StringIO()
    async with serve_app(create_upstream_app(script)) as upstream:
        args = ["dev", str(config), "-n", "1", "--endpoint", f"{upstream}/v1"]
        args += ["--model", "tiny-model", "--store", store]
        with contextlib.redirect_stdout(out):
            assert await asyncio.to_thread(main, args) == 0
    return out.getvalue()


@pytest.mark.parametrize("form", ["path", "url"])
async def test_dev_keeps_its_rollouts_in_the_store_it_is_given(tmp_path: Path, form: str) -> None:
    db = tmp_path / "dev.db"
    url = f"sqlite:///{db}"
    printed = await _dev(tmp_path, str(db) if form == "path" else url)
    assert f"fulmen dev: 1 rollouts kept (fulmen rollouts list --store {url})" in printed
    async with open_store(url, watchdog_interval=None) as store:
        (rollout,) = (await store.query_rollouts(RolloutQuery())).items
        assert rollout.status is RolloutStatus.SUCCEEDED
        assert rollout.input["id"] == "t0"
        calls = await read_llm_calls(store, rollout.rollout_id)
        assert [c.choices[0].text for c in calls] == ["A gateway records every call."]

    listed = io.StringIO()
    with contextlib.redirect_stdout(listed):
        assert await asyncio.to_thread(main, ["rollouts", "list", "--store", url, "--json"]) == 0
    assert rollout.rollout_id in listed.getvalue()
    assert json.loads(listed.getvalue())


async def test_dev_without_a_store_keeps_nothing_on_disk(tmp_path: Path) -> None:
    config = write_project(tmp_path, max_seq_len=4096)
    script = Script(replies=deque([Reply(content="ok")]))
    out = io.StringIO()
    async with serve_app(create_upstream_app(script)) as upstream:
        args = ["dev", str(config), "-n", "1", "--endpoint", f"{upstream}/v1", "--model", "m"]
        with contextlib.redirect_stdout(out):
            assert await asyncio.to_thread(main, args) == 0
    assert "rollouts kept" not in out.getvalue()
    assert not list(tmp_path.rglob("*.db"))
