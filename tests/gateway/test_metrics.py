"""The gateway's ``GET /metrics``: every metric appears and moves when its cause happens.

A real gateway on 127.0.0.1 in front of the scripted upstream; production capture with a rate
limit; a store that is away for a while (the records wait, then spill). The page is parsed with
``prometheus_client``'s own parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from fulmen.errors import StoreUnavailable
from fulmen.gateway import GatewayConfig, create_app
from fulmen.gateway.capture_config import CaptureConfig, SessionKeyConfig
from fulmen.store import open_store
from tests.gateway.conftest import new_attempt
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app

CALLS = 70  # tracked calls while the store is away: more than one spill batch

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(client: httpx.AsyncClient, url: str) -> Samples:
    page = await client.get(f"{url}/metrics", headers={"authorization": "Bearer tok"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(page.text)
        for s in family.samples
    }


class AwayStore:
    """A real memory store whose ``add_llm_calls`` is unreachable while ``away`` is set."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.away = False

    async def add_llm_calls(self, calls: Any) -> Any:
        if self.away:
            raise StoreUnavailable("the store is away (test)")
        return await self._inner.add_llm_calls(calls)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_every_metric_moves_with_its_cause(tmp_path: Path) -> None:
    inner = await open_store("memory://", watchdog_interval=None)
    store = AwayStore(inner)
    capture = CaptureConfig(
        session=SessionKeyConfig(header="x-session-id", idle_timeout_s=60),
        max_calls_per_minute=2,
    )
    config = GatewayConfig(
        flush_interval_s=0.01,
        connect_retries=0,
        read_timeout_s=5.0,
        capture=capture,
        max_pending=2,  # the third record waiting for the store goes to the spill file
        spill_dir=tmp_path / "spill",
    )
    auth = {"authorization": "Bearer tok"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with (
        serve_app(create_upstream_app(Script())) as upstream,
        serve_app(create_app(store, [f"{upstream}/v1"], config=config, token="tok")) as url,
        httpx.AsyncClient(timeout=30) as client,
    ):
        empty = await scrape(client, url)
        assert empty[("fulmen_gateway_records_total", ())] == 0
        assert empty[("fulmen_gateway_sessions", (("state", "open"),))] == 0
        # Production traffic: one session, three calls; the limit records two of them.
        for _ in range(3):
            r = await client.post(
                f"{url}/v1/chat/completions", json=body, headers={**auth, "x-session-id": "s1"}
            )
            assert r.status_code == 200
        # A tracked call while the store is away: its record waits, then spills.
        rollout_id, attempt_id = await new_attempt(inner)
        store.away = True
        tracked = f"{url}/rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions"
        # The recorder retries its first batch; beyond max_pending the records go to the spill
        # file (in batches: when 64 wait, or when the recorder's loop comes round).
        for _ in range(CALLS):
            assert (await client.post(tracked, json=body, headers=auth)).status_code == 200
        away = await scrape(client, url)
        store.away = False
        r = await client.post(f"{url}/gateway/flush", headers=auth)
        assert r.status_code == 200, r.text
        back = await scrape(client, url)
        await inner.aclose()
    ok = (("endpoint", "chat/completions"), ("status", "2xx"))
    assert back[("fulmen_gateway_call_seconds_count", ok)] == 3 + CALLS
    assert away[("fulmen_gateway_sessions", (("state", "open"),))] == 1
    assert away[("fulmen_gateway_calls_shed_total", ())] == 1
    assert away[("fulmen_gateway_records_spilled_total", ())] >= 1
    assert away[("fulmen_gateway_spill_backlog_records", ())] >= 1
    # Every record waits (the batch being retried is out of the queue, taken but not written).
    assert away[("fulmen_gateway_records_total", ())] == CALLS
    assert CALLS - 2 <= away[("fulmen_gateway_records_pending", ())] <= CALLS
    assert away[("fulmen_gateway_records_stored_total", ())] == 0
    assert back[("fulmen_gateway_records_pending", ())] == 0
    assert back[("fulmen_gateway_records_stored_total", ())] == CALLS
    assert ("fulmen_gateway_upstream_in_flight", (("upstream", f"{upstream}/v1"),)) in back
