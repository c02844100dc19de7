"""The routes that change what an engine serves need its admin token and paths it owns.

The built-in engine in this process (the tiny model) behind uvicorn on 127.0.0.1; vLLM's side
is its own API key, which the launcher hands over in the environment, never on the command line.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import httpx

from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.builtin.server import create_app
from tests.gateway.scripted_upstream import serve_app

TOKEN = "engine-admin-token"


async def test_admin_routes_need_the_token_and_a_path_under_the_roots(
    tiny_dir: Path, tool_adapter: Path, tmp_path: Path
) -> None:
    root = tmp_path / "run"
    root.mkdir()
    inside = shutil.copytree(tool_adapter, root / "adapter")
    outside = shutil.copytree(tool_adapter, tmp_path / "elsewhere")
    (root / "escape").symlink_to(outside)  # a link out of the root is outside too
    model = ServedModel(tiny_dir, served_name="tiny", max_lora_rank=16)
    app = create_app(model, admin_token=TOKEN, adapter_roots=[root])
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def load(path: Path | str, headers: dict[str, str] | None = None) -> httpx.Response:
            body = {"lora_name": "policy", "lora_path": str(path)}
            return await client.post("/v1/load_lora_adapter", json=body, headers=headers)

        no_token = await load(inside)
        wrong = await load(inside, {"Authorization": "Bearer nope"})
        out = await load(outside, bearer)
        missing = await load("/root/not-there", bearer)
        linked = await load(root / "escape", bearer)
        reload_out = await client.post("/v1/reload_weights", json={"path": "/etc"}, headers=bearer)
        unload = await client.post("/v1/unload_lora_adapter", json={"lora_name": "x"})
        models_before = (await client.get("/v1/models")).json()["data"]
        ok = await load(inside, bearer)
        models_after = (await client.get("/v1/models")).json()["data"]
        chat = await client.post(
            "/v1/chat/completions",
            json={
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
            },
        )
    assert no_token.status_code == wrong.status_code == unload.status_code == 401
    assert out.status_code == missing.status_code == linked.status_code == 403
    # The same answer whether the path exists or not: nothing of the file system shows.
    assert out.json()["error"]["message"] == missing.json()["error"]["message"]
    assert "not-there" not in missing.text and "elsewhere" not in out.text
    assert reload_out.status_code == 403
    assert [m["id"] for m in models_before] == ["tiny"]
    assert ok.status_code == 200 and [m["id"] for m in models_after] == ["tiny", "policy"]
    assert chat.status_code == 200  # model calls need no admin token


def test_vllm_gets_its_key_in_the_environment_only(tmp_path: Path) -> None:
    from fulmen.engines.vllm import VLLMLauncher

    launcher = VLLMLauncher("tiny", python=shutil.which("python3"), token=TOKEN)
    assert launcher.env["VLLM_API_KEY"] == TOKEN
    assert TOKEN not in " ".join(launcher.command)
    assert launcher._headers() == {"Authorization": f"Bearer {TOKEN}"}


async def test_a_generation_whose_client_left_is_cancelled(tiny_dir: Path) -> None:
    """A client gone before its reply began frees the engine (the gateway cancels for agents)."""
    import asyncio

    model = ServedModel(tiny_dir, served_name="tiny", max_model_len=4096)
    app = create_app(model, max_batch=1)
    scheduler = app.state.engine.scheduler
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3000,
        "ignore_eos": True,
    }
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url) as client:
        with contextlib.suppress(httpx.ReadTimeout):
            await client.post("/v1/chat/completions", json=body, timeout=0.5)
        for _ in range(200):
            if scheduler.running == 0:
                break
            await asyncio.sleep(0.02)
        assert scheduler.running == 0
        # The engine serves the next call at once.
        short = {**body, "max_tokens": 1}
        assert (
            await client.post("/v1/chat/completions", json=short, timeout=30)
        ).status_code == 200
