"""The comparison and diagnosis routes over a real SQLite store: the same figures as ``fulmen
runs compare --json`` and ``fulmen runs diagnose --json`` print, hostile input refused with the
value named, and a running run's engine counters read only where the dashboard may ask it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from fulmen.algorithms.grpo.diagnose import no_update_reason
from fulmen.asgi_task import AppTask, loopback_socket
from fulmen.cli.main import main
from fulmen.dashboard.app import create_app
from fulmen.store import Store, open_store
from fulmen.types import (
    LLMResource,
    ModelKind,
    ModelVersion,
    ResourcesCreate,
    RunMetrics,
    RunStatus,
)
from tests.dashboard.run_records import (
    MARKUP,
    NO_UPDATE,
    add_live_steps,
    fill_runs,
    health_values,
    step_values,
)

T = TypeVar("T")


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('runs-api') / 'store.db'}"

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await fill_runs(store)

    asyncio.run(fill())
    return url


def call(
    url: str,
    use: Callable[[httpx.AsyncClient, Store], Awaitable[T]],
) -> T:
    """Run ``use`` with a client of the dashboard over the store at ``url`` (in-process)."""

    async def go() -> T:
        async with open_store(url, watchdog_interval=None) as store:
            app = create_app(store)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                return await use(c, store)

    return asyncio.run(go())


def get(url: str, path: str, **params: Any) -> httpx.Response:
    async def use(client: httpx.AsyncClient, store: Store) -> httpx.Response:
        del store
        return await client.get(path, params=params)

    return call(url, use)


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_answers_what_the_cli_prints(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = get(store_url, "/api/runs/compare", run=["ra", "rb", "rc"])
    assert answer.status_code == 200
    shown = answer.json()
    printed = cli_json(capsys, "runs", "compare", "ra", "rb", "rc", "--store", store_url, "--json")
    assert shown["differences"] == printed["differences"]
    assert shown["paired"] == printed["paired"]
    for mine, theirs in zip(shown["runs"], printed["runs"], strict=True):
        assert {k: mine[k] for k in theirs} == theirs
    # by construction: the learning rate, the note and the seed differ; run_dir is left out
    assert set(shown["differences"]) == {"agent_note", "algorithm.grpo.learning_rate", "seed"}
    assert shown["differences"]["agent_note"] == [None, MARKUP, None]  # markup kept as data
    ra, rb, rc = shown["runs"]
    assert (ra["final"], ra["tasks"], rb["final"], rb["tasks"]) == (0.25, 4, 0.8, 5)
    assert rb["final_se"] == pytest.approx(0.2)  # stdev of [1,1,1,0,1] over sqrt(5)
    assert (rc["final"], rc["final_se"], rc["tasks"]) == (None, None, 0)  # never validated
    assert ra["split"]["rollouts"] == pytest.approx(9.0 / 10.1)
    assert shown["first"] == "ra" and rb["name"] == "run-rb" and rb["status"] == "succeeded"
    paired = shown["paired"]
    assert paired["rb"]["n"] == 4 and paired["rb"]["mean_difference"] == 0.5
    assert paired["rc"] is None  # no validation: nothing to pair
    reverse = get(store_url, "/api/runs/compare", run=["rb", "ra"]).json()
    assert reverse["paired"]["ra"]["mean_difference"] == -0.5


@pytest.mark.parametrize(
    ("runs", "status", "named"),
    [
        (["ra", "nope"], 404, "nope"),
        (["ra"], 422, "at least two"),
        ([], 422, "at least two"),
        (["ra", "ra"], 422, "'ra'"),
        (["ra", "x" * 200], 422, "xxxx"),
        ([f"r{i}" for i in range(9)], 422, "at most 8"),
    ],
)
def test_compare_refuses_what_it_cannot_compare(
    store_url: str, runs: list[str], status: int, named: str
) -> None:
    answer = get(store_url, "/api/runs/compare", run=runs)
    assert answer.status_code == status
    assert named in answer.json()["error"] and "Traceback" not in answer.text


def test_diagnosis_answers_what_the_cli_prints(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for run_id, bottleneck in (("ra", "rollouts take 89%"), ("rb", "the update takes 89%")):
        shown = get(store_url, f"/api/runs/{run_id}/diagnosis").json()
        printed = cli_json(capsys, "runs", "diagnose", run_id, "--store", store_url, "--json")
        assert [{"what": f["what"], "remedy": f["remedy"]} for f in shown["findings"]] == printed
        assert any(f["line"].startswith(bottleneck) for f in shown["findings"])
        assert (shown["steps"], shown["records"], shown["engine"]) == (3, 5, None)
    empty = get(store_url, "/api/runs/live/diagnosis").json()
    assert (empty["findings"], empty["steps"], empty["status"]) == ([], 0, "running")
    missing = get(store_url, "/api/runs/nope/diagnosis")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_health_names_the_steps_without_an_update_and_the_served_version(store_url: str) -> None:
    health = get(store_url, "/api/runs/rh/health").json()
    assert (health["run_id"], health["status"]) == ("rh", "succeeded")
    assert (health["steps"], health["updated"]) == (6, 4)
    assert [n["step"] for n in health["no_update"]] == list(NO_UPDATE)
    # each reason is the trainer's own sentence for that step's stored metrics
    for n in health["no_update"]:
        assert n["reason"] == no_update_reason(health_values(n["step"]))
    skipped, same = (n["reason"] for n in health["no_update"])
    assert skipped.startswith("the gradient norm was not finite")
    assert "every rollout in each of the 2 task groups scored the same" in same
    served = health["served"]
    assert (served["step"], served["decided"], served["kept_earlier"]) == (4, True, True)
    assert (served["reward_mean"], served["final_reward_mean"], served["best_step"]) == (
        0.75,
        0.5,
        4,
    )
    (version,) = served["versions"]
    assert (version["version"], version["resources_version"], version["kind"]) == (4, 14, "adapter")
    assert served["why"] == (
        "step 4 validated best (0.750 against the final 0.500): validation.keep_best serves it"
    )
    # runs that never updated nor served anything
    for run_id in ("ra", "live"):
        empty = get(store_url, f"/api/runs/{run_id}/health").json()
        assert empty["served"] is None and empty["no_update"] == []
    assert get(store_url, "/api/runs/ra/health").json()["steps"] == 3
    missing = get(store_url, "/api/runs/nope/health")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_a_running_run_serves_its_newest_version_and_a_resumed_step_counts_once(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def fill(store: Store) -> None:
        await fill_runs(store)
        await add_live_steps(store, range(1, 3), step_values(4.0, 4.0))
        # step 2 again, as a resumed run logs it, without an update this time
        again = {**step_values(4.0, 4.0), "updated": 0.0}
        await store.add_run_metrics([RunMetrics(run_id="live", step=2, time=2.5, values=again)])
        for step in (1, 2):
            await store.add_model_version(
                ModelVersion(
                    run_id="live",
                    version=step,
                    step=step,
                    kind=ModelKind.ADAPTER,
                    path=f"/runs/live/step-{step}",
                )
            )

    async def use(client: httpx.AsyncClient, store: Store) -> list[Any]:
        await fill(store)
        running = (await client.get("/api/runs/live/health")).json()
        await store.update_run("live", status=RunStatus.FAILED, ended_at=1200.0)
        ended = (await client.get("/api/runs/live/health")).json()
        return [running, ended]

    running, ended = call(url, use)
    assert (running["steps"], running["updated"]) == (2, 1)
    assert [n["step"] for n in running["no_update"]] == [2]
    served = running["served"]
    assert (served["step"], served["decided"]) == (2, False)
    assert [v["version"] for v in served["versions"]] == [2]
    assert served["why"].startswith("training: the engine serves the newest step's policy")
    assert ended["served"]["step"] == 2 and "no end-of-run decision" in ended["served"]["why"]


def test_a_running_runs_engine_counters_join_its_diagnosis(tmp_path: Path) -> None:
    """With ``--engine auto`` the live run's own engine is asked; without ``--engine``, never."""
    asked: list[str] = []

    async def metrics(request: Request) -> PlainTextResponse:
        asked.append(request.url.path)
        return PlainTextResponse(
            "fulmen_engine_prefix_cache_enabled 1\n"
            "fulmen_engine_prefix_cache_hit_tokens_total 5\n"
            "fulmen_engine_prefix_cache_miss_tokens_total 95\n"
        )

    async def diagnoses() -> dict[str | None, tuple[Any, Any, list[str]]]:
        engine = AppTask(Starlette(routes=[Route("/metrics", metrics)]), name="fake-engine")
        port = await engine.start(loopback_socket())
        try:
            async with open_store(
                f"sqlite:///{tmp_path / 'store.db'}", watchdog_interval=None
            ) as store:
                await fill_runs(store)
                await add_live_steps(store, range(1, 3), step_values(4.0, 4.0))
                llm = LLMResource(base_url=f"http://127.0.0.1:{port}/v1", model="tiny")
                await store.add_resources(
                    ResourcesCreate(resources={"llm": llm}, metadata={"run_id": "live"})
                )
                found: dict[str | None, tuple[Any, Any, list[str]]] = {}
                # auto, no --engine, and --engine naming another engine
                for linked in ("auto", None, "http://127.0.0.1:9/v1"):
                    app = create_app(store, engine_url=linked)
                    transport = httpx.ASGITransport(app=app)
                    async with httpx.AsyncClient(
                        transport=transport, base_url="http://127.0.0.1"
                    ) as client:
                        live = (await client.get("/api/runs/live/diagnosis")).json()
                        ended = (await client.get("/api/runs/ra/diagnosis")).json()
                    found[linked] = (live, ended, list(asked))
                    asked.clear()
                return found
        finally:
            await engine.stop(5)

    found = asyncio.run(diagnoses())
    live, ended, calls = found["auto"]
    assert live["engine"].startswith("http://127.0.0.1:") and calls == ["/metrics"]
    line = next(f["line"] for f in live["findings"] if "prefix cache" in f["line"])
    assert line.startswith("the prefix cache served 5% of prompt tokens (5 of 100)")
    assert ended["engine"] is None  # an ended run's engine is not asked
    for linked in (None, "http://127.0.0.1:9/v1"):
        live, _, calls = found[linked]
        assert live["engine"] is None and calls == []
        assert not any("prefix cache" in f["line"] for f in live["findings"])
