"""The dashboard's debugging actions through its JSON API, in-process over real stores: a
recorded toy rollout replays faithfully, a re-scoring job reports what changed, an A/B job runs
two prompt versions of the store, and what a web page may not choose is refused."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fulmen.dashboard.app import create_app
from fulmen.dashboard.debug_api import DebugTools
from fulmen.debugging import RecordedRollout
from fulmen.store import open_store
from fulmen.trainer.config import load_config
from tests.dashboard.finished import finish_rollout
from tests.dashboard.toy_store import TOY

TOY_DIR = TOY.parent


@pytest.fixture
def toy_imports() -> Iterator[None]:
    """Put examples/toy on ``sys.path`` (the config's agent) and forget its modules afterwards."""
    path, modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(TOY_DIR))
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if name in ("agent", "tasks"):
            del sys.modules[name]


def toy_config(tmp_path: Path) -> Any:
    return load_config(TOY, overrides=[f"run_dir={tmp_path / 'run'}", "rollouts.concurrency=4"])


async def api_over(store: Any, debug: DebugTools | None) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, debug=debug)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client
    finally:
        await app.state.jobs.aclose()


async def finished_job(client: httpx.AsyncClient, started: httpx.Response, limit_s: float) -> Any:
    assert started.status_code == 200, started.text
    job = started.json()
    for _ in range(int(limit_s * 10)):
        if job["state"] != "running":
            break
        await asyncio.sleep(0.1)
        job = (await client.get(f"/api/jobs/{job['job_id']}")).json()
    assert job["state"] == "done", job
    return job["result"]


async def test_without_launch_options_the_actions_say_which_one_they_need() -> None:
    async with open_store("memory://", watchdog_interval=None) as store:
        await finish_rollout(store, "r1", task="2+2", reward=1.0)
        async for client in api_over(store, None):
            caps = (await client.get("/api/debug")).json()
            assert not caps["replay"]["enabled"] and not caps["rescore"]["enabled"]
            replay = await client.post("/api/debug/replay", json={"rollout_id": "r1"})
            assert replay.status_code == 400 and "--config" in replay.json()["error"]
            rescore = await client.post("/api/debug/rescore", json={})
            assert rescore.status_code == 400 and "--reward" in rescore.json()["error"]
            ab = await client.post("/api/debug/ab", json={"a": "prompt@1", "b": "prompt@2"})
            assert ab.status_code == 400 and "--config" in ab.json()["error"]
            form = await client.post(
                "/api/debug/replay",
                content='{"rollout_id": "r1"}',
                headers={"content-type": "text/plain"},
            )
            assert form.status_code == 403


async def test_a_web_page_cannot_name_files_modules_or_too_many_tasks(tmp_path: Path) -> None:
    async with open_store("memory://", watchdog_interval=None) as store:
        async for client in api_over(store, DebugTools(config=toy_config(tmp_path))):
            for ref in (str(TOY), "os:system"):
                refused = await client.post("/api/debug/ab", json={"a": ref, "b": "prompt@1"})
                assert refused.status_code == 422 and ref in refused.json()["error"]
            too_many = await client.post("/api/debug/ab", json={"a": "p@1", "b": "p@2", "n": 65})
            assert too_many.status_code == 422 and "n" in too_many.json()["error"]
            missing = await client.post("/api/debug/replay", json={"rollout_id": "nope"})
            assert missing.status_code == 404 and "nope" in missing.json()["error"]
            assert (await client.get("/api/jobs/unknown")).status_code == 404


async def test_rescore_reports_the_changed_count_and_one_job_runs_at_a_time() -> None:
    from fulmen.transitions.trajectory import load_attempt

    release = asyncio.Event()

    async def everything_is_one(rollout: RecordedRollout) -> float:
        await release.wait()
        return 1.0

    async with open_store("memory://", watchdog_interval=None) as store:
        for rollout_id, reward in (("r1", 1.0), ("r2", 0.5), ("r3", 0.0)):
            await finish_rollout(store, rollout_id, task=rollout_id, reward=reward)
        tools = DebugTools(reward=everything_is_one, reward_spec="tests:everything_is_one")
        async for client in api_over(store, tools):
            started = await client.post("/api/debug/rescore", json={"limit": 10})
            second = await client.post("/api/debug/rescore", json={})
            assert second.status_code == 409 and started.json()["job_id"] in second.text
            release.set()
            result = await finished_job(client, started, limit_s=10)
        # read-only: the store still holds the old reward
        assert (await load_attempt(store, "r3")).final_reward == 0.0
    assert (result["rollouts"], result["scored"], result["changed"]) == (3, 3, 2)
    assert result["old"]["mean"] == pytest.approx(0.5) and result["new"]["mean"] == 1.0
    assert [i["rollout_id"] for i in result["most_changed"]] == ["r3", "r2"]


@pytest.mark.slow
@pytest.mark.usefixtures("toy_imports")
async def test_a_recorded_toy_rollout_replays_to_its_reward(toy_store: Any, tmp_path: Path) -> None:
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import Mode, RolloutQuery

    async with open_store(toy_store.url, watchdog_interval=None) as store:
        page = await store.query_rollouts(RolloutQuery(mode=Mode.TRAIN, limit=1))
        rollout_id = page.items[0].rollout_id
        recorded = (await load_attempt(store, rollout_id)).final_reward
        async for client in api_over(store, DebugTools(config=toy_config(tmp_path))):
            started = await client.post("/api/debug/replay", json={"rollout_id": rollout_id})
            report = await finished_job(client, started, limit_s=60)
    assert report["is_faithful"] and report["divergences"] == []
    assert report["served"] == report["recorded_calls"] == 1
    assert (
        report["reward"] == pytest.approx(recorded)
        and report["recorded_reward"] == report["reward"]
    )


@pytest.mark.slow
@pytest.mark.usefixtures("toy_imports")
async def test_an_ab_job_runs_two_prompt_versions_of_the_store(tmp_path: Path) -> None:
    from agent import TOY_PROMPT  # examples/toy, on the path by the fixture

    from fulmen.debugging.ab import load_prompt_file
    from fulmen.prompts import publish_prompt

    async with open_store("memory://", watchdog_interval=None) as store:
        await publish_prompt(store, "prompt", TOY_PROMPT)
        await publish_prompt(store, "prompt", load_prompt_file(TOY_DIR / "worse_prompt.json"))
        async for client in api_over(store, DebugTools(config=toy_config(tmp_path))):
            body = {"a": "prompt@1", "b": "prompt@2", "n": 2}
            started = await client.post("/api/debug/ab", json=body)
            result = await finished_job(client, started, limit_s=120)
    c = result["comparison"]
    assert result["labels"] == ["prompt@1", "prompt@2"] and result["task_ids"] == ["v0", "v1"]
    assert result["failed_a"] == result["failed_b"] == 0 and c["n"] == 2
    assert c["mean_a"] == pytest.approx(sum(result["rewards_a"]) / 2)
    assert c["mean_b"] == pytest.approx(sum(result["rewards_b"]) / 2)
    assert c["mean_difference"] == pytest.approx(c["mean_b"] - c["mean_a"])


def test_fulmen_dashboard_checks_config_and_reward_before_it_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fulmen.cli.main import main

    db = tmp_path / "store.db"

    async def create() -> None:
        async with open_store(f"sqlite:///{db}", watchdog_interval=None):
            pass

    asyncio.run(create())
    assert main(["dashboard", "--store", str(db), "--reward", "no_such_module:fn"]) == 1
    assert "no_such_module:fn" in capsys.readouterr().err
    missing = tmp_path / "missing.yaml"
    assert main(["dashboard", "--store", str(db), "--config", str(missing)]) == 1
    assert "missing.yaml" in capsys.readouterr().err
