"""No request can break the store: hostile and out-of-range input over real HTTP.

Each test sends raw JSON (what a buggy or hostile client can send, beyond what the Python
types let a caller build) to ``fulmen store serve``'s app on 127.0.0.1, backed by SQLite and by
PostgreSQL. Two invariants: no input gets a 5xx, and whatever the store acknowledged it can
read back — a refused request leaves the queue working for everyone else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fulmen.store import open_store
from tests.pg_server import fresh_pg_database
from tests.store.http_server import aserve_store

LONG_LIST = 40_000  # above PostgreSQL's 32,767 parameters per statement
INT32_MAX = 2**31 - 1  # resources versions are INTEGER columns
INT64_MAX = 2**63 - 1  # positions and sequence numbers are BIGINT columns


@pytest.fixture(params=["sqlite", "postgresql"])
async def http(
    request: pytest.FixtureRequest, tmp_path: Path, pg_url: str | None
) -> AsyncIterator[httpx.AsyncClient]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        if pg_url is None:
            pytest.skip("PostgreSQL binaries are not installed")
        url = await fresh_pg_database(pg_url)
    async with (
        open_store(url, watchdog_interval=None) as store,
        aserve_store(store) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as client,
    ):
        yield client


def raw(body: str) -> dict[str, Any]:
    """Keyword arguments for a request whose body is sent byte for byte (``1e400``, ``NaN``)."""
    return {"content": body.encode(), "headers": {"content-type": "application/json"}}


def refused(response: httpx.Response, *names: str) -> str:
    """Assert a 422 whose message names every one of ``names``; return the message."""
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "invalid_request"
    assert body["request_id"]
    for name in names:
        assert name in body["error"], (name, body["error"])
    return str(body["error"])


async def enqueue_and_claim(http: httpx.AsyncClient, rollout_id: str) -> tuple[str, str]:
    """The queue still works: enqueue a rollout, claim it, read it back."""
    response = await http.post(
        "/v1/rollouts", json={"rollouts": [{"input": 1, "rollout_id": rollout_id}]}
    )
    assert response.status_code == 200, response.text
    response = await http.post("/v1/rollouts/claim", json={"worker_id": "w"})
    assert response.status_code == 200, response.text
    (claim,) = response.json()
    assert claim["rollout"]["rollout_id"] == rollout_id
    assert (await http.get(f"/v1/rollouts/{rollout_id}")).status_code == 200
    listed = await http.post("/v1/rollouts/query", json={})
    assert listed.status_code == 200, listed.text
    return rollout_id, claim["attempt"]["attempt_id"]


async def test_non_finite_rollout_values_are_refused(http: httpx.AsyncClient) -> None:
    # 1e400 is valid JSON that parses to inf; before, it was stored as null and every read,
    # claim and listing afterwards failed with a 500.
    for body, field in [
        (
            '{"rollouts":[{"input":1,"config":{"heartbeat_timeout_s":1e400}}]}',
            "heartbeat_timeout_s",
        ),
        ('{"rollouts":[{"input":1,"config":{"timeout_s":-1e400}}]}', "timeout_s"),
        ('{"rollouts":[{"input":{"x":[1,1e400]}}]}', "input"),
        ('{"rollouts":[{"input":1,"metadata":{"m":NaN}}]}', "metadata"),
    ]:
        message = refused(await http.post("/v1/rollouts", **raw(body)), field)
        assert "finite" in message or "JSON" in message
    refused(
        await http.post("/v1/rollouts/wait", **raw('{"rollout_ids":[],"timeout":NaN}')), "timeout"
    )
    await enqueue_and_claim(http, "after-inf")


async def test_non_finite_span_and_call_values_are_refused(http: httpx.AsyncClient) -> None:
    rollout_id, attempt_id = await enqueue_and_claim(http, "r1")
    ids = f'"rollout_id":"{rollout_id}","attempt_id":"{attempt_id}"'
    span = f'{ids},"trace_id":"ab","span_id":"s1","name":"step"'
    for body, field in [
        (f'{{"spans":[{{{span},"start_time":1e400}}]}}', "start_time"),
        (f'{{"spans":[{{{span},"start_time":1,"end_time":NaN}}]}}', "end_time"),
        (f'{{"spans":[{{{span},"start_time":1,"attributes":{{"a":-Infinity}}}}]}}', "attributes"),
        (
            f'{{"spans":[{{{span},"start_time":1,"events":[{{"name":"e","timestamp":1e999}}]}}]}}',
            "timestamp",
        ),
    ]:
        refused(await http.post("/v1/spans", **raw(body)), field)
    call = f'"call_id":"c1",{ids}'
    for body, field in [
        (f'{{"calls":[{{{call},"started_at":1e400}}]}}', "started_at"),
        (f'{{"calls":[{{{call},"started_at":1,"latency_s":Infinity}}]}}', "latency_s"),
        (
            f'{{"calls":[{{{call},"started_at":1,"choices":[{{"logprobs":[-0.5,-1e400]}}]}}]}}',
            "logprobs",
        ),
        (f'{{"calls":[{{{call},"started_at":1,"response":{{"p":NaN}}}}]}}', "response"),
    ]:
        refused(await http.post("/v1/llm_calls", **raw(body)), field)
    # What was acknowledged reads back: a good span and call, then both listings work.
    good_span = {"rollout_id": rollout_id, "attempt_id": attempt_id, "trace_id": "ab",
                 "span_id": "s2", "name": "step", "start_time": 1.5, "end_time": 1e308}  # fmt: skip
    assert (await http.post("/v1/spans", json={"spans": [good_span]})).status_code == 200
    choice = {"token_ids": [1], "logprobs": [-5e-324]}
    good_call = {"call_id": "c2", "rollout_id": rollout_id, "attempt_id": attempt_id,
                 "started_at": 2.0, "choices": [choice]}  # fmt: skip
    assert (await http.post("/v1/llm_calls", json={"calls": [good_call]})).status_code == 200
    spans = (await http.get(f"/v1/rollouts/{rollout_id}/spans")).json()["items"]
    assert [(s["span_id"], s["end_time"]) for s in spans] == [("s2", 1e308)]
    calls = (await http.get(f"/v1/rollouts/{rollout_id}/llm_calls")).json()["items"]
    assert [c["choices"][0]["logprobs"] for c in calls] == [[-5e-324]]


async def test_integers_beyond_their_column_are_refused(http: httpx.AsyncClient) -> None:
    too_big = INT64_MAX + 1
    refused(await http.post("/v1/rollouts/query", json={"cursor": too_big}), "cursor")
    refused(
        await http.post("/v1/rollouts/query", json={"resources_version": INT32_MAX + 1}),
        "resources_version",
    )
    refused(
        await http.post(
            "/v1/rollouts", json={"rollouts": [{"input": 1, "resources_version": 2**40}]}
        ),
        "resources_version",
    )
    rollout_id, _ = await enqueue_and_claim(http, "r1")
    response = await http.get(
        f"/v1/rollouts/{rollout_id}/spans", params={"after_sequence": too_big}
    )
    refused(response, "after_sequence")
    for version in (str(INT32_MAX + 1), str(2**70)):
        refused(await http.get(f"/v1/resources/{version}"), "version")
    # The largest values that fit are fine.
    page = await http.post("/v1/rollouts/query", json={"cursor": INT64_MAX})
    assert page.status_code == 200 and page.json()["items"] == []
    response = await http.get(
        f"/v1/rollouts/{rollout_id}/llm_calls", params={"after_sequence": INT64_MAX}
    )
    assert response.status_code == 200 and response.json()["items"] == []
    assert (await http.get(f"/v1/resources/{INT32_MAX}")).status_code == 404


async def test_path_versions_must_be_ascii_digits(http: httpx.AsyncClient) -> None:
    # int() accepts "²" as a digit character and then fails; before, that was a 500.
    for version in ("%C2%B2", "%D9%A3", "%201", "+1", "0", "-1", "1.0"):
        refused(await http.get(f"/v1/resources/{version}"), "version")


async def test_nul_bytes_are_refused_where_they_would_reach_a_column(
    http: httpx.AsyncClient,
) -> None:
    # PostgreSQL text cannot hold NUL: before, these were 500s there (and stored on SQLite).
    nul = "a\x00b"
    for path, body, field in [
        ("/v1/rollouts", {"rollouts": [{"input": 1, "rollout_id": nul}]}, "rollout_id"),
        ("/v1/rollouts", {"rollouts": [{"input": 1, "task_id": nul}]}, "task_id"),
        ("/v1/rollouts/claim", {"worker_id": nul}, "worker_id"),
        ("/v1/rollouts/claim", {"worker_id": "w", "claim_id": nul}, "claim_id"),
        ("/v1/rollouts/query", {"rollout_ids": [nul]}, "rollout_ids"),
        ("/v1/workers/heartbeat", {"worker_id": "w", "attempt_ids": [nul]}, "attempt_ids"),
    ]:
        message = refused(await http.post(path, json=body), field)
        assert "NUL" in message
    rollout_id, attempt_id = await enqueue_and_claim(http, "r1")
    refused(await http.patch(f"/v1/attempts/{attempt_id}", json={"error": nul}), "error")
    span = {"rollout_id": rollout_id, "attempt_id": attempt_id, "trace_id": "ab",
            "span_id": "s1", "name": nul, "start_time": 1.0}  # fmt: skip
    refused(await http.post("/v1/spans", json={"spans": [span]}), "name")
    refused(await http.get("/v1/rollouts/a%00b"), "rollout_id")
    refused(await http.get("/v1/attempts/a%00b"), "attempt_id")
    # NUL inside free-form JSON is stored escaped and reads back as sent.
    response = await http.post(
        "/v1/rollouts", json={"rollouts": [{"input": {"k": nul}, "rollout_id": "r2"}]}
    )
    assert response.status_code == 200, response.text
    assert (await http.get("/v1/rollouts/r2")).json()["input"] == {"k": nul}


async def test_strings_longer_than_their_column_are_refused(http: httpx.AsyncClient) -> None:
    rollout_id, attempt_id = await enqueue_and_claim(http, "r1")
    span = {"rollout_id": rollout_id, "attempt_id": attempt_id, "trace_id": "ab",
            "span_id": "s1", "name": "n", "start_time": 1.0, "parent_id": "p" * 65}  # fmt: skip
    refused(await http.post("/v1/spans", json={"spans": [span]}), "parent_id")
    refused(
        await http.post("/v1/rollouts", json={"rollouts": [{"input": 1, "rollout_id": "r" * 129}]}),
        "rollout_id",
    )
    refused(await http.get(f"/v1/rollouts/{'r' * 129}"), "rollout_id")
    # At the limit, in multi-byte characters, it is stored and read back.
    span["parent_id"] = "é" * 64
    assert (await http.post("/v1/spans", json={"spans": [span]})).status_code == 200
    spans = (await http.get(f"/v1/rollouts/{rollout_id}/spans")).json()["items"]
    assert spans[0]["parent_id"] == "é" * 64


async def test_id_lists_longer_than_the_parameter_limit(http: httpx.AsyncClient) -> None:
    # Before, PostgreSQL answered 503 "the number of query arguments cannot exceed 32767".
    rollout_id, attempt_id = await enqueue_and_claim(http, "r1")
    ids = [f"id-{i}" for i in range(LONG_LIST)] + [rollout_id]
    page = await http.post("/v1/rollouts/query", json={"rollout_ids": ids})
    assert page.status_code == 200, page.text
    assert [r["rollout_id"] for r in page.json()["items"]] == [rollout_id]
    waited = await http.post("/v1/rollouts/wait", json={"rollout_ids": ids, "timeout": 0})
    assert waited.status_code == 404 and "id-0" in waited.json()["error"]
    beat = await http.post(
        "/v1/workers/heartbeat",
        json={"worker_id": "w", "attempt_ids": [*ids[:LONG_LIST], attempt_id]},
    )
    assert beat.status_code == 200, beat.text
    assert beat.json()["running_attempt_ids"] == [attempt_id]


async def test_rewards_and_prune_refuse_what_no_column_can_hold(http: httpx.AsyncClient) -> None:
    rid, _ = await enqueue_and_claim(http, "rewarded")
    for body, field in [
        ('{"rollout_id":"rewarded","values":{"reward":1e400}}', "values"),
        ('{"rollout_id":"rewarded","values":{"a\\u0000":1}}', "values"),
        ('{"rollout_id":"rewarded","values":{}}', "values"),
        ('{"response_id":"' + "r" * 129 + '","values":{"reward":1}}', "response_id"),
        ('{"session_id":"' + "s" * 121 + '","values":{"reward":1}}', "session_id"),
        ('{"rollout_id":"rewarded","key":"k\\u0000","values":{"reward":1}}', "key"),
        ('{"rollout_id":"rewarded","session_id":"s","values":{"reward":1}}', "exactly one"),
    ]:
        refused(await http.post("/v1/rewards", **raw(body)), field)
    # Before the check, a time whose UTC value falls outside years 1-9999 was a 500.
    for when in ("0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "2026-01-01T00:00"):
        refused(await http.post("/v1/prune", json={"ended_before": when}), "ended_before")
    assert (await http.get(f"/v1/rollouts/{rid}/rewards")).json() == []
    await enqueue_and_claim(http, "after-rewards")


async def test_runs_and_model_versions_refuse_what_no_column_can_hold(
    http: httpx.AsyncClient,
) -> None:
    started = await http.post("/v1/runs", json={"run_id": "run", "name": "n", "started_at": 1.0})
    assert started.status_code == 200, started.text
    for body, field in [
        ('{"run_id":"r","name":"n","started_at":1e400}', "started_at"),
        ('{"run_id":"r","name":"n","started_at":1,"config":{"lr":NaN}}', "config"),
        ('{"run_id":"r\\u0000","name":"n","started_at":1}', "run_id"),
        ('{"run_id":"r","name":"n\\u0000","started_at":1}', "name"),
        ('{"run_id":"r","name":"","started_at":1}', "name"),
        ('{"run_id":"' + "r" * 129 + '","name":"n","started_at":1}', "run_id"),
        ('{"run_id":"r","name":"n","started_at":1,"status":"paused"}', "status"),
    ]:
        refused(await http.post("/v1/runs", **raw(body)), field)
    for body, field in [
        ('{"status":"succeeded","ended_at":1e400}', "ended_at"),
        ('{"status":"done"}', "status"),
    ]:
        refused(await http.patch("/v1/runs/run", **raw(body)), field)
    record = '"run_id":"run","time":1'
    for body, field in [
        (f'{{"metrics":[{{{record},"step":1,"values":{{"loss":1e400}}}}]}}', "values"),
        (f'{{"metrics":[{{{record},"step":1,"values":{{"loss":NaN}}}}]}}', "values"),
        (f'{{"metrics":[{{{record},"step":{INT64_MAX + 1}}}]}}', "step"),
        (f'{{"metrics":[{{{record},"step":-1}}]}}', "step"),
        (f'{{"metrics":[{{{record},"step":1,"values":{{"a\\u0000":1}}}}]}}', "values"),
        (f'{{"metrics":[{{{record},"step":1,"text":{{"stage":"x\\u0000"}}}}]}}', "text"),
        ('{"metrics":[{"run_id":"run","step":1,"time":-1e999}]}', "time"),
    ]:
        refused(await http.post("/v1/runs/metrics", **raw(body)), field)
    version = '"run_id":"run","step":1,"kind":"adapter","path":"p"'
    for body, field in [
        (f'{{{version},"version":{INT32_MAX + 1}}}', "version"),
        (f'{{{version},"version":0}}', "version"),
        (f'{{{version},"version":1,"scores":{{"val":1e400}}}}', "scores"),
        ('{"run_id":"run","version":1,"step":1,"kind":"adapter","path":"p\\u0000"}', "path"),
        ('{"run_id":"run","version":1,"step":1,"kind":"lora","path":"p"}', "kind"),
        (f'{{{version},"version":1,"resources_version":{INT32_MAX + 1}}}', "resources_version"),
    ]:
        refused(await http.post("/v1/model_versions", **raw(body)), field)
    for path, field in [
        ("/v1/runs?limit=0", "limit"),
        ("/v1/runs?offset=-1", "offset"),
        (f"/v1/runs?offset={INT64_MAX + 1}", "offset"),
        (f"/v1/runs/run/metrics?after_step={INT64_MAX + 1}", "after_step"),
        ("/v1/runs/run/metrics?after_step=1e400", "after_step"),
        ("/v1/model_versions?run_id=" + "r" * 129, "run_id"),
        ("/v1/runs/" + "r" * 129, "run_id"),
    ]:
        refused(await http.get(path), field)
    # Nothing refused was stored, and what is stored reads back.
    assert (await http.get("/v1/runs/run/metrics")).json() == {"items": [], "next_cursor": None}
    assert (await http.get("/v1/model_versions")).json() == []
    listed = (await http.get("/v1/runs")).json()["items"]
    assert [r["run_id"] for r in listed] == ["run"]
    ok = {"run_id": "run", "step": INT64_MAX, "time": 1e308, "values": {"loss": -5e-324}}
    assert (await http.post("/v1/runs/metrics", json={"metrics": [ok]})).status_code == 200
    (stored,) = (await http.get("/v1/runs/run/metrics")).json()["items"]
    assert (stored["step"], stored["time"], stored["values"]) == (
        INT64_MAX,
        1e308,
        {"loss": -5e-324},
    )
