"""``fulmen gateway`` as a real process: serves, records, stops cleanly; refuses open binds."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import httpx

from tests.gateway.scripted_upstream import Script, create_upstream_app, free_socket, serve_app

CHAT = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FULMEN_TOKEN", None)
    return env


async def test_gateway_command_serves_and_stops_on_sigterm() -> None:
    script = Script()
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    async with serve_app(create_upstream_app(script)) as upstream:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fulmen", "gateway", "--store", "memory://",
            "--upstream", f"{upstream}/v1", "--port", str(port),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(),
        )  # fmt: skip
        try:
            async with httpx.AsyncClient() as client:
                for _ in range(200):
                    try:
                        if (await client.get(f"http://127.0.0.1:{port}/healthz")).is_success:
                            break
                    except httpx.TransportError:
                        await asyncio.sleep(0.05)
                r = await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT)
                assert r.status_code == 200
                assert r.json()["choices"][0]["message"]["content"] == "ok"
                health = (await client.get(f"http://127.0.0.1:{port}/healthz")).json()
                assert health["recorder"]["recorded"] == 1
        finally:
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), timeout=15)
        stderr = await proc.stderr.read() if proc.stderr else b""
    assert code == 0, stderr.decode()
    assert b"Traceback" not in stderr
    assert script.requests[0]["return_token_ids"] is True


def test_gateway_command_refuses_open_bind_without_token() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fulmen", "gateway", "--store", "memory://",
         "--upstream", "http://127.0.0.1:9/v1", "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert result.returncode == 1
    assert "refusing to bind '0.0.0.0' without a token" in result.stderr
