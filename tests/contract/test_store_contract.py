"""The store service keeps its committed OpenAPI contract under fuzzing, on SQLite and PostgreSQL.

schemathesis generates requests from ``docs/openapi.json`` (positive: what the spec allows;
negative: what it forbids) and sends them to ``fulmen store serve``'s app on 127.0.0.1 over a
real database. Every answer must be a documented status with a body that matches the spec,
and none may be a 5xx. The run is bounded: ``MAX_EXAMPLES`` cases per operation and mode.
A summary line with the figures is printed (cases, 5xx, spec violations, per backend).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.contract.fuzzing import fuzz
from tests.pg_server import fresh_pg_database
from tests.store.http_server import serve_store

SPEC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
TOKEN = "contract-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
# Per operation and mode; FULMEN_FUZZ_EXAMPLES raises it for a longer run. CI runs 8 (25, then
# 15: the contract tests took 209 s, then 190 s, of a saturated two-core CI run of 2,573 s).
MAX_EXAMPLES = int(os.environ.get("FULMEN_FUZZ_EXAMPLES", "8"))


@pytest.fixture(params=["sqlite", "postgresql"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, pg_url: str | None
) -> Iterator[tuple[str, str]]:
    """``(backend name, base URL)`` of a store service over a fresh database."""
    if request.param == "sqlite":
        database = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        if pg_url is None:
            pytest.skip("PostgreSQL binaries are not installed")
        database = asyncio.run(fresh_pg_database(pg_url))
    with serve_store(database, token=TOKEN, watchdog_interval=None) as url:
        yield request.param, url


def _seed(base_url: str) -> dict[str, str]:
    """Store one rollout with an attempt, a span, a call and resources; return their ids."""
    with httpx.Client(base_url=base_url, headers=AUTH, timeout=30) as http:

        def post(path: str, body: object) -> object:
            response = http.post(path, json=body)
            response.raise_for_status()
            return response.json()

        resources = {"llm": {"kind": "llm", "base_url": "http://127.0.0.1:1/v1", "model": "m"}}
        post("/v1/resources", {"resources": resources})
        post("/v1/rollouts", {"rollouts": [{"input": {"q": 1}, "rollout_id": "seed"}]})
        (claim,) = post("/v1/rollouts/claim", {"worker_id": "seed-worker"})  # type: ignore[misc]
        attempt_id = claim["attempt"]["attempt_id"]
        ids = {"rollout_id": "seed", "attempt_id": attempt_id}
        span = {**ids, "trace_id": "ab", "span_id": "s1", "name": "step", "start_time": 1.0}
        post("/v1/spans", {"spans": [span]})
        post("/v1/llm_calls", {"calls": [{**ids, "call_id": "c1", "started_at": 1.0}]})
        post("/v1/runs", {"run_id": "seed-run", "name": "seed", "started_at": 1.0})
        post("/v1/runs/metrics", {"metrics": [{"run_id": "seed-run", "step": 1, "time": 1.0}]})
        version = {"run_id": "seed-run", "version": 1, "step": 1, "kind": "adapter", "path": "p"}
        post("/v1/model_versions", version)
    return ids


def test_store_service_keeps_its_contract(
    served: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    backend, store_url = served
    ids = _seed(store_url)
    spec = json.loads(SPEC.read_text(encoding="utf-8"))
    # Reads of the seeded records exercise stored data; every other operation gets random ids.
    seeded = {"rollout_id": ids["rollout_id"]}
    fixed = {
        name: seeded for name in ("get_rollout", "list_attempts", "query_spans", "query_llm_calls")
    }
    fixed["get_attempt"] = {"attempt_id": ids["attempt_id"]}
    fixed.update({name: {"run_id": "seed-run"} for name in ("get_run", "query_run_metrics")})
    report = fuzz(
        spec, store_url, label=backend, headers=AUTH, max_examples=MAX_EXAMPLES,
        path_parameters=fixed,
    )  # fmt: skip
    with capsys.disabled():
        print(f"\n{report.summary()}")
    operations = sum(len(methods) for methods in spec["paths"].values())
    assert len(report.by_operation) == operations  # every operation was called
    assert report.server_errors == 0, "\n".join(report.failures)
    assert report.spec_violations == 0, "\n".join(report.failures)
