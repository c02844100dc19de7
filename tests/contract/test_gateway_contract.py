"""The gateway keeps its committed OpenAPI contract under fuzzing, over SQLite and PostgreSQL.

schemathesis generates requests from ``docs/gateway-openapi.json`` and sends them to a real
gateway on 127.0.0.1 (with a bearer token) in front of the scripted vLLM-like upstream, writing
call records to a real store. Its control routes and the model route of every wire API (chat
completions, completions, Responses, Messages), untracked and tracked (on a claimed attempt),
must answer documented statuses with bodies that match the spec, and never a 5xx. A summary
line with the figures is printed per backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from fulmen.gateway import GatewayConfig, create_app
from fulmen.gateway.openapi import gateway_openapi_json
from fulmen.store import open_store
from fulmen.types import RolloutCreate
from tests.contract.fuzzing import fuzz
from tests.contract.threaded import in_thread
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app
from tests.pg_server import fresh_pg_database

SPEC = Path(__file__).resolve().parents[2] / "docs" / "gateway-openapi.json"
TOKEN = "gateway-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
# Per operation and mode; FULMEN_FUZZ_EXAMPLES raises it for a longer run. CI runs 8 (25, then
# 15: the contract tests took 209 s, then 190 s, of a saturated two-core CI run of 2,573 s).
MAX_EXAMPLES = int(os.environ.get("FULMEN_FUZZ_EXAMPLES", "8"))


def test_committed_spec_is_up_to_date() -> None:
    assert SPEC.read_text(encoding="utf-8") == gateway_openapi_json(), (
        "docs/gateway-openapi.json is stale: run "
        "`python -m fulmen.gateway.openapi > docs/gateway-openapi.json`"
    )


@contextlib.asynccontextmanager
async def _gateway(database: str) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """A store, a scripted upstream and a gateway; yields its URL and a running attempt."""
    async with open_store(database, watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input={"q": 1}, rollout_id="fuzzed")])
        (claim,) = await store.claim("fuzz-worker")
        ids = {"rollout_id": "fuzzed", "attempt_id": claim.attempt.attempt_id}
        config = GatewayConfig(flush_interval_s=0.01, connect_retries=0, read_timeout_s=10.0)
        async with serve_app(create_upstream_app(Script())) as upstream:
            app = create_app(store, [f"{upstream}/v1"], token=TOKEN, config=config)
            async with serve_app(app) as url:
                yield url, ids


@pytest.fixture(params=["sqlite", "postgresql"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, pg_url: str | None
) -> Iterator[tuple[str, str, dict[str, str]]]:
    """``(backend name, gateway URL, ids of a running attempt)``."""
    if request.param == "sqlite":
        database = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        if pg_url is None:
            pytest.skip("PostgreSQL binaries are not installed")
        database = asyncio.run(fresh_pg_database(pg_url))
    with in_thread(lambda: _gateway(database)) as (url, ids):
        yield request.param, url, ids


def test_gateway_keeps_its_contract(
    served: tuple[str, str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    backend, url, ids = served
    spec = json.loads(SPEC.read_text(encoding="utf-8"))
    # Tracked calls on the claimed attempt (recorded), then on generated ids (mostly unknown).
    on_attempt = fuzz(
        spec,
        url,
        label=f"gateway/{backend} (running attempt)",
        headers=AUTH,
        max_examples=MAX_EXAMPLES,
        path_parameters={
            name: ids for name in ("chat_completions", "completions", "responses", "messages")
        },
    )
    anywhere = fuzz(
        spec, url, label=f"gateway/{backend} (generated ids)", headers=AUTH,
        max_examples=MAX_EXAMPLES,
    )  # fmt: skip
    with capsys.disabled():
        print(f"\n{on_attempt.summary()}\n{anywhere.summary()}")
    operations = sum(len(methods) for methods in spec["paths"].values())
    assert len(on_attempt.by_operation) == operations  # every operation was called
    assert on_attempt.statuses[200] > 0  # completions went through, not only refusals
    assert anywhere.statuses[404] > 0  # unknown attempts were refused as documented
    for report in (on_attempt, anywhere):
        assert report.server_errors == 0, "\n".join(report.failures)
        assert report.spec_violations == 0, "\n".join(report.failures)
