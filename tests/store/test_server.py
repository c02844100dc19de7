"""The store service's HTTP surface, against a real uvicorn server on 127.0.0.1.

Raw httpx requests check the wire format of errors: every failure is JSON
``{"error", "code", "detail", "request_id"}`` with the right status, and never a traceback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.store import Store
from fulmen.store.memory import MemoryStore
from fulmen.store.server import create_app
from fulmen.store.sql.store import SqlStore
from fulmen.types import RolloutCreate
from tests.store.http_server import aserve_store

TOKEN = "s3cret"
AUTH = {"authorization": f"Bearer {TOKEN}"}
LIMIT = 64 * 1024


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    store = await MemoryStore.connect(watchdog_interval=None)
    yield store
    await store.aclose()


@pytest.fixture
async def http(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        aserve_store(store, token=TOKEN, max_body_bytes=LIMIT) as url,
        httpx.AsyncClient(base_url=url, headers=AUTH, timeout=10) as client,
    ):
        yield client


def _failing_select(conn: Connection) -> None:
    conn.execute(sa.text("SELECT secret FROM no_such_table WHERE x = :p"), {"p": "param-value"})


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "code", "detail", "request_id"}
    assert body["code"] == code
    assert response.headers["x-request-id"] == body["request_id"]
    assert "Traceback" not in response.text
    return body


async def test_schema_error_names_the_field(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/rollouts", json={"rollouts": [{"input": 1, "mode": "bogus"}]})
    body = assert_error(response, 422, "invalid_request")
    assert "rollouts.0.mode" in str(body["error"])
    assert body["detail"] == [
        {
            "loc": ["rollouts", 0, "mode"],
            "msg": "Input should be 'train', 'val', 'test' or 'production'",
            "type": "enum",
        }
    ]


async def test_unknown_field_and_bad_query_are_refused(http: httpx.AsyncClient) -> None:
    body = assert_error(
        await http.post("/v1/rollouts/claim", json={"worker_id": "w", "limt": 2}),
        422,
        "invalid_request",
    )
    assert "limt" in str(body["error"])
    (rollout,) = (await http.post("/v1/rollouts", json={"rollouts": [{"input": 1}]})).json()
    response = await http.get(f"/v1/rollouts/{rollout['rollout_id']}/spans?limit=zero")
    assert "limit" in str(assert_error(response, 422, "invalid_request")["error"])


async def test_malformed_json_is_400(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/spans", content=b'{"spans": [', headers=AUTH)
    assert "malformed JSON" in str(assert_error(response, 400, "invalid_request")["error"])


async def test_unknown_id_is_404(http: httpx.AsyncClient) -> None:
    body = assert_error(await http.get("/v1/rollouts/nope"), 404, "not_found")
    assert "nope" in str(body["error"])
    assert_error(await http.get("/v1/attempts/nope"), 404, "not_found")
    assert_error(await http.get("/v1/resources/7"), 404, "not_found")
    assert_error(await http.get("/v1/resources/seven"), 422, "invalid_request")


async def test_unknown_route_and_method(http: httpx.AsyncClient) -> None:
    assert_error(await http.get("/v1/nothing-here"), 404, "not_found")
    response = await http.delete("/v1/stats")
    assert_error(response, 405, "method_not_allowed")
    assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD"}
    response = await http.put("/v1/rollouts/some-id")
    assert_error(response, 405, "method_not_allowed")
    assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD", "PATCH"}


async def test_illegal_transition_is_409(http: httpx.AsyncClient, store: Store) -> None:
    (rollout,) = await store.enqueue([RolloutCreate(input=1)])
    path = f"/v1/rollouts/{rollout.rollout_id}"
    assert (await http.patch(path, json={"status": "cancelled"})).status_code == 200
    body = assert_error(
        await http.patch(path, json={"status": "cancelled"}), 409, "invalid_transition"
    )
    assert rollout.rollout_id in str(body["error"])
    # Only "cancelled" may be set by a caller.
    assert_error(await http.patch(path, json={"status": "succeeded"}), 422, "invalid_request")


async def test_conflicting_rewrite_is_409(http: httpx.AsyncClient) -> None:
    first = {"rollouts": [{"input": 1, "rollout_id": "r1"}]}
    assert (await http.post("/v1/rollouts", json=first)).status_code == 200
    other = {"rollouts": [{"input": 2, "rollout_id": "r1"}]}
    assert_error(await http.post("/v1/rollouts", json=other), 409, "conflict")


async def test_payload_too_large_declared(http: httpx.AsyncClient) -> None:
    body = b'{"spans": [' + b" " * LIMIT + b"]}"
    response = await http.post("/v1/spans", content=body)
    assert_error(response, 413, "payload_too_large")


async def test_payload_too_large_streamed_without_length(http: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"spans": ['
        for _ in range(8):
            yield b" " * (LIMIT // 4)
        yield b"]}"

    # A generator body is sent chunked, with no content-length: the limit applies while reading.
    response = await http.post("/v1/spans", content=chunks())
    assert_error(response, 413, "payload_too_large")


async def test_auth_missing_and_wrong(http: httpx.AsyncClient, store: Store) -> None:
    url = str(http.base_url)
    async with httpx.AsyncClient(base_url=url) as anonymous:
        body = assert_error(await anonymous.post("/v1/rollouts", json={"rollouts": [{"input": 1}]}),
                            401, "unauthorized")  # fmt: skip
        assert "missing" in str(body["error"])
        response = await anonymous.get("/v1/stats", headers={"authorization": "Bearer nope"})
        assert "wrong" in str(assert_error(response, 401, "unauthorized")["error"])
        assert response.headers["www-authenticate"] == "Bearer"
        # The service description is public: clients read capabilities before they auth.
        info = (await anonymous.get("/v1/info")).json()
        assert info["auth_required"] is True
    assert (await store.stats()).rollouts  # nothing was written by the refused requests
    assert sum((await store.stats()).rollouts.values()) == 0


async def test_unexpected_error_is_a_json_500_and_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(MemoryStore):
        async def stats(self):  # type: ignore[override]
            raise RuntimeError("disk on fire")

    broken = Broken()
    async with (
        aserve_store(broken) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        response = await client.get("/v1/stats")
    body = assert_error(response, 500, "internal_error")
    assert "disk on fire" not in response.text
    request_id = body["request_id"]
    assert body["error"] == (
        f"internal server error (request {request_id}; details in the server log)"
    )
    logged = [r for r in caplog.records if str(request_id) in r.getMessage()]
    assert len(logged) == 1 and "disk on fire" in caplog.text


async def test_database_errors_leave_no_sql_in_the_body(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A driver error becomes a generic 5xx; its SQL and parameters go to the log only."""

    class Failing(SqlStore):
        async def stats(self):  # type: ignore[override]
            await self._runner.read(_failing_select)
            raise AssertionError("unreachable")

    store = await Failing.connect(f"sqlite:///{tmp_path / 's.db'}", watchdog_interval=None)
    try:
        async with aserve_store(store) as url, httpx.AsyncClient(base_url=url) as client:
            response = await client.get("/v1/stats")
    finally:
        await store.aclose()
    body = assert_error(response, 503, "store_unavailable")
    assert "SELECT" not in response.text and "no_such_table" not in response.text
    assert body["detail"] is None
    assert "no_such_table" in caplog.text and str(body["request_id"]) in caplog.text


async def test_ids_with_slashes_round_trip(http: httpx.AsyncClient) -> None:
    payload = {"rollouts": [{"input": 1, "rollout_id": "team/a b?c"}]}
    assert (await http.post("/v1/rollouts", json=payload)).status_code == 200
    response = await http.get("/v1/rollouts/team%2Fa%20b%3Fc")
    assert response.status_code == 200
    assert response.json()["rollout_id"] == "team/a b?c"


def test_create_app_rejects_a_bad_limit(store: Store) -> None:
    with pytest.raises(ValueError, match="max_body_bytes"):
        create_app(store, max_body_bytes=0)


async def test_the_spec_is_served_without_a_token(http: httpx.AsyncClient) -> None:
    from fulmen.store.openapi import build_openapi

    async with httpx.AsyncClient(base_url=str(http.base_url)) as anonymous:
        response = await anonymous.get("/v1/openapi.json")
    assert response.status_code == 200
    assert response.json() == build_openapi()


def test_serve_store_in_a_thread_for_sync_callers() -> None:
    from tests.store.http_server import serve_store

    with serve_store("memory://", token=TOKEN) as url:
        assert httpx.get(f"{url}/v1/stats", headers=AUTH).json()["spans"] == 0
        assert httpx.get(f"{url}/v1/stats").status_code == 401


async def test_health_answers_without_a_token(http: httpx.AsyncClient) -> None:
    # Kubernetes probes (fulmen deploy) carry no token; every other route still needs one.
    anonymous = httpx.AsyncClient(base_url=str(http.base_url), timeout=10)
    async with anonymous:
        response = await anonymous.get("/health")
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
        assert_error(await anonymous.get("/v1/stats"), 401, "unauthorized")
