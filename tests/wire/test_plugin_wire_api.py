"""A wire API from outside ``fulmen/``: an entry point adds it, and the gateway serves it.

The test writes a small installed distribution (a module and its ``.dist-info`` with an entry
point in the ``fulmen.wire_apis`` group) into a folder it puts on ``PYTHONPATH``, then runs a
real gateway (token set, SQLite store) in front of the scripted token-level engine in a
subprocess. The toy API, ``POST /v1/toy/generate`` (``{"prompt"}`` in, ``{"text"}`` out, its own
key header and error shape), is translated to the engine's chat path like Responses and
Messages; nothing under ``fulmen/`` names it. The call must come back in the toy shape, streamed
and whole, its errors in the toy's error shape, its record carry the engine's token ids, the
SFT export read it as a conversation, and the OpenAPI spec list its routes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PLUGIN = '''
"""A toy wire API: a prompt in, a text out, served over the engine's chat path."""

from collections.abc import Mapping
from typing import Any

import orjson

from fulmen.wire.api import ApiSpec, WireApi, error_message
from fulmen.wire.errors import BadRequest
from fulmen.wire.translation import ChatTranslation


class Pieces:
    """The toy's stream: one ``piece`` event per chunk of text, then ``done``."""

    def opening(self) -> bytes:
        return b""

    def add(self, chunk: Mapping[str, Any]) -> bytes:
        choices = chunk.get("choices") or [{}]
        text = (choices[0].get("delta") or {}).get("content")
        return b"event: piece\\ndata: " + orjson.dumps({"text": text}) + b"\\n\\n" if text else b""

    def closing(self, chat, error) -> bytes:
        return b"event: done\\ndata: " + orjson.dumps({"failed": error is not None}) + b"\\n\\n"


class Generate:
    """One toy call as a chat completion."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body

    def chat(self) -> ChatTranslation:
        prompt = self.body.get("prompt")
        if not isinstance(prompt, str):
            raise BadRequest("'prompt' must be a string", detail={"param": "prompt"})
        request = {"model": self.body.get("model", "m"), "messages": toy_messages(self.body)}
        for field in ("stream", "temperature"):
            if field in self.body:
                request[field] = self.body[field]
        return ChatTranslation(request)

    def behaviour_fields(self) -> Mapping[str, Any]:
        return self.body

    def reply(self, chat: Mapping[str, Any]) -> dict[str, Any]:
        return {"object": "generation", "text": chat["choices"][0]["message"]["content"]}

    def error_reply(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        return failure(status, body)

    def events(self) -> Pieces:
        return Pieces()


def toy_messages(body):
    return [{"role": "user", "content": body["prompt"]}]


def failure(status, body):
    return {"failure": {"status": status, "why": error_message(body)}}


class Toy(WireApi):
    def translation(self, body):
        return Generate(body)

    def error_body(self, status, openai_body):
        return failure(status, openai_body)

    def conversation(self, request):
        return toy_messages(request) if isinstance(request.get("prompt"), str) else None

    def reply_message(self, response):
        text = response.get("text")
        return {"role": "assistant", "content": text} if isinstance(text, str) else None


TOY = Toy(
    name="toy-generate",
    endpoint="toy/generate",
    key_header="x-toy-key",
    spec=ApiSpec(
        "toy_generate",
        "A toy generation",
        request="ToyRequest",
        reply="ToyReply",
        error="ToyError",
        schemas={
            "ToyRequest": {"type": "object", "required": ["prompt"]},
            "ToyReply": {"type": "object", "required": ["text"]},
            "ToyError": {"type": "object", "required": ["failure"]},
        },
    ),
)
'''

# Run in the subprocess: a gateway serving the plugin's API, driven over HTTP.
DRIVER = """
import asyncio, json

import httpx

from fulmen.transitions.export import call_conversation
from fulmen.gateway import GatewayConfig, create_app
from fulmen.gateway.openapi import build_gateway_openapi
from fulmen.store import open_store
from fulmen.types import RolloutCreate
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app

TOKEN = "gateway-token"


async def main(database):
    out = {}
    async with open_store(database, watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input={"q": 1}, rollout_id="r1")])
        (claim,) = await store.claim("worker")
        script = Script(default_content="four")
        config = GatewayConfig(flush_interval_s=0.01, connect_retries=0)
        async with serve_app(create_upstream_app(script)) as upstream:
            app = create_app(store, [f"{upstream}/v1"], token=TOKEN, config=config)
            async with serve_app(app) as url, httpx.AsyncClient() as client:
                route = f"{url}/rollout/r1/attempt/{claim.attempt.attempt_id}/v1/toy/generate"
                key = {"x-toy-key": TOKEN}
                whole = await client.post(route, json={"prompt": "2+2?"}, headers=key)
                out["whole"] = [whole.status_code, whole.json()]
                streamed = await client.post(
                    route, json={"prompt": "2+2?", "stream": True}, headers=key
                )
                out["stream"] = [streamed.headers["content-type"], streamed.text]
                bad = await client.post(route, json={"prompt": 4}, headers=key)
                out["bad"] = [bad.status_code, bad.json()]
                nokey = await client.post(route, json={"prompt": "hi"})
                out["no_key"] = [nokey.status_code, nokey.json()]
                flushed = await client.post(f"{url}/gateway/flush", headers=key)
                out["flush"] = flushed.status_code
                out["engine_got"] = [r.get("messages") for r in script.requests]
                out["engine_headers"] = [h.get("x-toy-key") for h in script.headers]
        calls = (await store.query_llm_calls("r1")).items
        out["calls"] = [
            {
                "endpoint": c.endpoint,
                "error": c.error is not None,
                "prompt_ids": len(c.prompt_token_ids or []),
                "token_ids": [len(ch.token_ids or []) for ch in c.choices],
                "conversation": call_conversation(c),
            }
            for c in calls
        ]
    spec = build_gateway_openapi()
    out["spec_paths"] = [p for p in spec["paths"] if p.endswith("toy/generate")]
    out["spec_error"] = spec["paths"]["/v1/toy/generate"]["post"]["responses"]["400"]
    print(json.dumps(out))


asyncio.run(main(__import__("sys").argv[1]))
"""


def _install(folder: Path) -> dict[str, str]:
    """Install the toy distribution into ``folder``; return the subprocess's environment."""
    folder.mkdir(exist_ok=True)
    (folder / "toy_wire.py").write_text(PLUGIN)
    info = folder / "toy_wire-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-wire\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fulmen.wire_apis]\ntoy = toy_wire:TOY\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.getcwd()])}


def test_an_installed_wire_api_is_served_recorded_documented_and_exported(
    tmp_path: Path,
) -> None:
    env = _install(tmp_path / "site")
    database = f"sqlite:///{tmp_path / 'store.db'}"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DRIVER), database],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])

    # The toy's own reply shape, from the engine's chat reply; the toy's stream events.
    assert out["whole"] == [200, {"object": "generation", "text": "four"}]
    content_type, events = out["stream"]
    assert content_type.startswith("text/event-stream")
    pieces = [json.loads(b.split("data: ", 1)[1]) for b in events.split("\n\n") if "piece" in b]
    assert "".join(p["text"] for p in pieces) == "four"
    assert events.rstrip().endswith('data: {"failed":false}')
    # Its errors in its own shape: a body its translation refuses, a missing key (its header).
    assert out["bad"][0] == 400 and out["bad"][1]["failure"]["why"] == "'prompt' must be a string"
    assert out["no_key"] == [401, {"failure": {"status": 401, "why": "missing or wrong API key"}}]
    assert out["flush"] == 200
    # The engine got chat completions, and never the gateway's token in the toy's key header.
    assert out["engine_got"] == [[{"role": "user", "content": "2+2?"}]] * 2
    assert out["engine_headers"] == [None, None]

    # Every call recorded under the toy's endpoint, the refused one with its error; the two
    # served ones at token level, read by the export as conversations.
    assert [(c["endpoint"], c["error"]) for c in out["calls"]] == [
        ("toy/generate", False),
        ("toy/generate", False),
        ("toy/generate", True),
    ]
    for call in out["calls"][:2]:
        assert not call["error"] and call["prompt_ids"] > 0 and call["token_ids"] == [4]
        assert call["conversation"] == [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "four"},
        ]
    # The spec lists its three routes, errors in its shape.
    assert len(out["spec_paths"]) == 3
    assert out["spec_error"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ToyError"
    }


def test_an_entry_point_that_takes_a_served_path_is_named(tmp_path: Path) -> None:
    env = _install(tmp_path)
    (tmp_path / "toy_wire-0.1.dist-info" / "entry_points.txt").write_text(
        "[fulmen.wire_apis]\ntoy = toy_wire:CLASH\n"
    )
    (tmp_path / "toy_wire.py").write_text(
        PLUGIN + "\nCLASH = Toy(name='clash', endpoint='chat/completions')\n"
    )
    code = "from fulmen.wire.table import wire_apis\nwire_apis()"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "entry point 'toy' (toy_wire:CLASH) claims /v1/chat/completions" in done.stderr
