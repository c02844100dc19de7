"""The dashboard's JSON API over a real store, in-process: the token gate, what a foreign web
page could forge, and errors that name the bad value."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from fulmen.dashboard.app import create_app
from fulmen.store import open_store
from tests.dashboard.finished import finish_rollout


async def client_for(
    token: str | None, host: str = "127.0.0.1:4780"
) -> AsyncIterator[httpx.AsyncClient]:
    async with open_store("memory://", watchdog_interval=None) as store:
        await finish_rollout(store, "r1", task="2+2", reward=1.0)
        app = create_app(store, token=token)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as client:
            yield client


@pytest.fixture
async def open_api() -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(None):
        yield client


async def test_a_token_is_required_and_no_data_leaks_without_it() -> None:
    async for client in client_for("s3cret"):
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
            response = await client.get("/api/rollouts", headers=headers)
            assert response.status_code == 401
            assert "r1" not in response.text and response.headers["www-authenticate"] == "Bearer"
        ok = await client.get("/api/rollouts", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["items"][0]["rollout_id"] == "r1"
        page = await client.get("/")  # the page itself holds no data and needs no token
        assert (
            page.status_code == 200
            and "script-src 'self'" in page.headers["content-security-policy"]
        )


async def test_without_a_token_foreign_hosts_and_form_posts_are_refused() -> None:
    async for client in client_for(None, host="evil.example:4780"):
        assert (await client.get("/api/rollouts")).status_code == 403
    async for client in client_for(None, host="[::1]:4780"):
        assert (await client.get("/api/rollouts")).status_code == 200


async def test_serve_needs_json_and_an_engine(open_api: httpx.AsyncClient) -> None:
    form = await open_api.post(
        "/api/model_versions/serve",
        content='{"run_id": "x", "version": 1}',
        headers={"content-type": "text/plain"},
    )
    assert form.status_code == 403
    no_engine = await open_api.post("/api/model_versions/serve", json={"run_id": "x", "version": 1})
    assert no_engine.status_code == 400 and "--engine" in no_engine.json()["error"]


async def test_errors_name_the_bad_value(open_api: httpx.AsyncClient) -> None:
    missing = await open_api.get("/api/rollouts/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]
    other = await open_api.get("/api/rollouts/r1", params={"attempt": "not-r1s"})
    assert other.status_code == 404 and "not-r1s" in other.json()["error"]
    bad = await open_api.get("/api/rollouts", params={"mode": "sideways"})
    assert bad.status_code == 422 and "mode" in bad.json()["error"]
    assert "sideways" in bad.json()["error"]


async def test_tokens_are_named_by_the_runs_tokenizer_when_no_engine_answers() -> None:
    """After a run its engine is gone: the page showed ``#782`` ids, now the model's text."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from fulmen.engines.models import resolve_model
    from fulmen.types import Run

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model("tiny")))
    ids = tokenizer.encode("hello world", add_special_tokens=False)
    async with open_store("memory://", watchdog_interval=None) as store:
        # The linked engine ended with the run: nothing listens on port 9 of loopback.
        app = create_app(store, engine_url="http://127.0.0.1:9/v1")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            query = {"ids": ",".join(map(str, ids))}
            unnamed = (await client.get("/api/tokens", params=query)).json()
            assert unnamed["texts"] == {} and "--engine URL" in unnamed["why"]
            await store.start_run(
                Run(run_id="r", name="r", config={"model": "tiny"}, started_at=1.0)
            )
            named = (await client.get("/api/tokens", params=query)).json()
    assert named["source"] == "tokenizer of tiny"
    assert "".join(named["texts"][str(i)] for i in ids) == "hello world"
