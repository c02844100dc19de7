"""One API suite for every engine: the built-in server and vLLM, both as real processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fulmen.engines.launcher import EngineProcess
from tests.engines.adapters import CALL_ARGUMENTS, MESSAGES, TOOLS

HELLO = [{"role": "user", "content": "Hello, how are you today?"}]


def post(engine: EngineProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{engine.root_url}{path}", json=body, timeout=120)


def ok(engine: EngineProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = post(engine, path, body)
    assert response.status_code == 200, response.text
    return response.json()


def chat(engine: EngineProcess, **body: Any) -> dict[str, Any]:
    return ok(
        engine,
        "/v1/chat/completions",
        {"model": "tiny", "messages": HELLO, "temperature": 0, "max_tokens": 12, **body},
    )


def stream(engine: EngineProcess, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "POST", f"{engine.root_url}{path}", json={**body, "stream": True}, timeout=120
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        events.append(json.loads(line[len("data: ") :]))
    return events


def test_models_lists_the_base_model(engine: EngineProcess) -> None:
    body = httpx.get(f"{engine.base_url}/models").json()
    assert body["object"] == "list"
    assert "tiny" in [m["id"] for m in body["data"]]


def test_health_names_the_start_its_launcher_made(engine: EngineProcess) -> None:
    # How a launcher knows its own server from another that took the port (test_launcher.py).
    assert engine.instance is not None and len(engine.instance) == 16
    health = httpx.get(f"{engine.root_url}/health", timeout=30)
    assert health.status_code == 200
    assert health.headers["x-fulmen-instance"] == engine.instance


def test_chat_returns_token_ids_and_logprobs(engine: EngineProcess) -> None:
    body = chat(engine, return_token_ids=True, logprobs=True, top_logprobs=3)
    prompt = ok(
        engine, "/tokenize", {"model": "tiny", "messages": HELLO, "add_generation_prompt": True}
    )["tokens"]
    assert body["prompt_token_ids"] == prompt
    choice = body["choices"][0]
    ids = choice["token_ids"]
    assert len(ids) == body["usage"]["completion_tokens"] == 12
    assert choice["finish_reason"] == "length"
    entries = choice["logprobs"]["content"]
    assert len(entries) == len(ids)
    for entry in entries:
        assert entry["logprob"] <= 0.0
        top = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(top) == 3 and top == sorted(top, reverse=True)
        # greedy picks the most likely token, so its logprob is the top one
        assert entry["logprob"] == pytest.approx(top[0], abs=1e-4)
    assert "".join(e["token"] for e in entries) == choice["message"]["content"]


def test_greedy_is_deterministic(engine: EngineProcess) -> None:
    first = chat(engine, return_token_ids=True)["choices"][0]["token_ids"]
    second = chat(engine, return_token_ids=True)["choices"][0]["token_ids"]
    assert first == second


def test_completion_accepts_token_id_prompt(engine: EngineProcess) -> None:
    ids = ok(engine, "/tokenize", {"model": "tiny", "prompt": "SELECT name FROM t1;"})["tokens"]
    base = {
        "model": "tiny",
        "max_tokens": 8,
        "temperature": 0,
        "return_token_ids": True,
        "logprobs": 1,
    }
    by_text = ok(engine, "/v1/completions", {**base, "prompt": "SELECT name FROM t1;"})
    by_ids = ok(engine, "/v1/completions", {**base, "prompt": ids})
    a, b = by_text["choices"][0], by_ids["choices"][0]
    assert b["prompt_token_ids"] == ids
    assert a["token_ids"] == b["token_ids"] and len(b["token_ids"]) == 8
    assert a["text"] == b["text"]
    assert len(b["logprobs"]["token_logprobs"]) == 8
    assert "".join(b["logprobs"]["tokens"]) == b["text"]


def test_n_choices_with_seed_are_reproducible(engine: EngineProcess) -> None:
    body = {"temperature": 1.0, "seed": 11, "n": 3, "return_token_ids": True, "max_tokens": 10}
    first, second = chat(engine, **body), chat(engine, **body)
    assert [c["index"] for c in first["choices"]] == [0, 1, 2]
    outputs = [c["token_ids"] for c in first["choices"]]
    assert outputs == [c["token_ids"] for c in second["choices"]]
    assert len({tuple(o) for o in outputs}) > 1  # the choices are different samples
    assert first["usage"]["completion_tokens"] == sum(len(o) for o in outputs)


def test_chat_stream_matches_non_stream(engine: EngineProcess) -> None:
    full = chat(engine, return_token_ids=True)["choices"][0]
    events = stream(
        engine,
        "/v1/chat/completions",
        {
            "model": "tiny",
            "messages": HELLO,
            "temperature": 0,
            "max_tokens": 12,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        },
    )
    choices = [c for e in events for c in e["choices"]]
    assert choices[0]["delta"]["role"] == "assistant"
    assert [t for c in choices for t in c.get("token_ids") or []] == full["token_ids"]
    assert "".join(c["delta"].get("content") or "" for c in choices) == full["message"]["content"]
    assert choices[-1]["finish_reason"] == "length"
    assert events[-1]["usage"]["completion_tokens"] == 12


def test_completion_stream_matches_non_stream(engine: EngineProcess) -> None:
    body = {
        "model": "tiny",
        "prompt": "The quick brown fox",
        "temperature": 0,
        "max_tokens": 10,
        "return_token_ids": True,
    }
    full = ok(engine, "/v1/completions", body)["choices"][0]
    choices = [c for e in stream(engine, "/v1/completions", body) for c in e["choices"]]
    assert [t for c in choices for t in c.get("token_ids") or []] == full["token_ids"]
    assert "".join(c["text"] for c in choices) == full["text"]


def test_stop_string_ends_the_completion(engine: EngineProcess) -> None:
    text = chat(engine, max_tokens=20)["choices"][0]["message"]["content"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    cut = chat(engine, max_tokens=20, stop=[stop])["choices"][0]
    assert cut["finish_reason"] == "stop"
    assert cut["message"]["content"] == text[: text.index(stop)]


def test_concurrent_requests_get_their_own_results(engine: EngineProcess) -> None:
    prompts = [f"Count {i}: one two three" + " four" * i for i in range(8)]
    body = {"model": "tiny", "temperature": 0, "max_tokens": 16, "return_token_ids": True}
    alone = [
        ok(engine, "/v1/completions", {**body, "prompt": p})["choices"][0]["token_ids"]
        for p in prompts
    ]

    async def together() -> list[list[int]]:
        async with httpx.AsyncClient(timeout=120) as client:
            responses = await asyncio.gather(
                *(
                    client.post(f"{engine.base_url}/completions", json={**body, "prompt": p})
                    for p in prompts
                )
            )
        return [r.json()["choices"][0]["token_ids"] for r in responses]

    assert asyncio.run(together()) == alone


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/chat/completions", {"model": "no-such-model", "messages": HELLO}, 404),
        ("/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 100_000}, 400),
        ("/v1/completions", {"model": "tiny", "prompt": "x", "temperature": -1}, 400),
        ("/v1/chat/completions", {"model": "tiny", "messages": HELLO, "top_p": 0}, 400),
        ("/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": "many"}, 400),
        ("/v1/unload_lora_adapter", {"lora_name": "never-loaded"}, 404),
    ],
)
def test_errors_are_openai_shaped(
    engine: EngineProcess, path: str, body: dict[str, Any], status: int
) -> None:
    response = post(engine, path, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str)
    assert "param" in error and "code" in error
    assert chat(engine, max_tokens=2)["choices"][0]["finish_reason"] == "length"  # still serving


def test_context_too_long_is_a_400(engine: EngineProcess) -> None:
    huge = "word " * 5000
    response = post(engine, "/v1/completions", {"model": "tiny", "prompt": huge, "max_tokens": 4})
    assert response.status_code == 400
    assert "context" in response.json()["error"]["message"]


def _tool_chat(engine: EngineProcess, model: str, **extra: Any) -> dict[str, Any]:
    return ok(
        engine,
        "/v1/chat/completions",
        {
            "model": model,
            "messages": MESSAGES,
            "tools": TOOLS,
            "temperature": 0,
            "max_tokens": 40,
            "return_token_ids": True,
            **extra,
        },
    )


def test_adapter_hot_load_changes_output_and_back(
    engine: EngineProcess, tool_adapter: Path
) -> None:
    before = _tool_chat(engine, "tiny")["choices"][0]
    assert "tool_calls" not in before["message"] or not before["message"]["tool_calls"]
    asyncio.run(engine.load_adapter("weather", str(tool_adapter)))
    try:
        assert "weather" in [m["id"] for m in httpx.get(f"{engine.base_url}/models").json()["data"]]
        tuned = _tool_chat(engine, "weather")["choices"][0]
        assert tuned["token_ids"] != before["token_ids"]
        assert tuned["finish_reason"] == "tool_calls"
        call = tuned["message"]["tool_calls"][0]
        assert call["type"] == "function" and call["id"]
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == CALL_ARGUMENTS
        assert not tuned["message"]["content"]
        # the base model is unchanged while the adapter is loaded
        assert _tool_chat(engine, "tiny")["choices"][0]["token_ids"] == before["token_ids"]
        events = stream(
            engine,
            "/v1/chat/completions",
            {
                "model": "weather",
                "messages": MESSAGES,
                "tools": TOOLS,
                "temperature": 0,
                "max_tokens": 40,
            },
        )
        deltas = [c["delta"] for e in events for c in e["choices"]]
        calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
        assert "".join(tc["function"].get("name") or "" for tc in calls) == "get_weather"
        arguments = "".join(tc["function"].get("arguments") or "" for tc in calls)
        assert json.loads(arguments) == CALL_ARGUMENTS
        assert "<tool_call>" not in "".join(d.get("content") or "" for d in deltas)
    finally:
        asyncio.run(engine.unload_adapter("weather"))
    assert (
        post(
            engine,
            "/v1/chat/completions",
            {"model": "weather", "messages": MESSAGES, "max_tokens": 2},
        ).status_code
        == 404
    )
    assert _tool_chat(engine, "tiny")["choices"][0]["token_ids"] == before["token_ids"]


def test_bad_adapter_path_is_refused(engine: EngineProcess, tmp_path: Path) -> None:
    response = post(
        engine,
        "/v1/load_lora_adapter",
        {"lora_name": "broken", "lora_path": str(tmp_path / "missing")},
    )
    assert 400 <= response.status_code < 500
    assert "error" in response.json()
    assert chat(engine, max_tokens=2)["choices"][0]["finish_reason"] == "length"


def test_policy_version_follows_weight_updates(engine: EngineProcess, tool_adapter: Path) -> None:
    if not engine.capabilities.policy_version:
        pytest.skip("engine does not report policy versions")
    response = post(
        engine,
        "/v1/chat/completions",
        {"model": "tiny", "messages": HELLO, "max_tokens": 2, "temperature": 0},
    )
    v0 = response.json()["policy_version"]
    assert response.headers["x-fulmen-policy-version"] == str(v0)
    v1 = asyncio.run(engine.load_adapter("versioned", str(tool_adapter)))
    try:
        assert v1 > v0  # the engine's counter (base calls report their weights' version)
        tuned = post(
            engine,
            "/v1/chat/completions",
            {"model": "versioned", "messages": HELLO, "max_tokens": 2},
        )
        assert tuned.json()["policy_version"] == v1
        assert tuned.headers["x-fulmen-policy-version"] == str(v1)
        events = stream(
            engine,
            "/v1/chat/completions",
            {"model": "versioned", "messages": HELLO, "max_tokens": 2},
        )
        assert {e["policy_version"] for e in events} == {v1}
        # another adapter coming and going changes neither policy: a trainer that retires its
        # previous adapter must not see its current one's calls as stale
        asyncio.run(engine.load_adapter("other", str(tool_adapter)))
        asyncio.run(engine.unload_adapter("other"))
        again = post(
            engine,
            "/v1/chat/completions",
            {"model": "versioned", "messages": HELLO, "max_tokens": 2},
        )
        assert again.json()["policy_version"] == v1
        base = post(
            engine, "/v1/chat/completions", {"model": "tiny", "messages": HELLO, "max_tokens": 2}
        )
        assert base.json()["policy_version"] == v0
    finally:
        v2 = asyncio.run(engine.unload_adapter("versioned"))
    assert v2 == v1 + 3


def test_full_reload_changes_output_and_back(engine: EngineProcess, perturbed_dir: Path) -> None:
    if not engine.capabilities.full_reload:
        pytest.skip("engine has no full weight reload over HTTP")
    before = chat(engine, return_token_ids=True)["choices"][0]["token_ids"]
    v1 = asyncio.run(engine.reload_weights(str(perturbed_dir)))
    try:
        after = chat(engine, return_token_ids=True)
        assert after["choices"][0]["token_ids"] != before
        if engine.capabilities.policy_version:  # vLLM reports none
            assert after["policy_version"] == v1
    finally:
        asyncio.run(engine.reload_weights(None))
    assert chat(engine, return_token_ids=True)["choices"][0]["token_ids"] == before


def test_vllms_routes_outside_the_api_need_the_launchers_token(engine: EngineProcess) -> None:
    """vLLM's development routes (weights, caches, sleep, pause) answer only fulmen's token."""
    from fulmen.engines.vllm import VLLMLauncher

    if not isinstance(engine, VLLMLauncher):
        pytest.skip("the built-in engine guards its own routes (tests/engines/test_admin.py)")
    routes = ("/collective_rpc", "/reset_prefix_cache", "/pause", "/sleep", "/server_info")
    body = {"method": "reload_weights", "kwargs": {"weights_path": "/"}}
    for route in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            refused = httpx.post(f"{engine.root_url}{route}", json=body, headers=headers)
            assert refused.status_code == 401, (route, refused.text)
    assert httpx.get(f"{engine.root_url}/health", timeout=30).status_code == 200
    token = {"Authorization": f"Bearer {engine.admin_token}"}
    allowed = httpx.post(f"{engine.root_url}/reset_prefix_cache", headers=token, timeout=60)
    assert allowed.status_code == 200, allowed.text
    assert chat(engine)["choices"][0]["message"]  # the OpenAI API is as open as before


def _metrics(engine: EngineProcess) -> dict[str, float]:
    response = httpx.get(f"{engine.root_url}/metrics", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    values: dict[str, float] = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split(" ")
            values[name] = float(value)
    return values


def test_metrics_count_prefix_cache_hits_and_tokens(engine: EngineProcess) -> None:
    from fulmen.engines.vllm import VLLMLauncher

    if isinstance(engine, VLLMLauncher):
        pytest.skip("vLLM's /metrics has its own names")
    shared = [{"role": "system", "content": "You are terse. " * 12}]
    before = _metrics(engine)
    assert before["fulmen_engine_prefix_cache_enabled"] == 1  # on by default
    for question in ("What is 2 + 2?", "Name a colour."):
        chat(engine, messages=[*shared, {"role": "user", "content": question}], max_tokens=5)
    after = _metrics(engine)
    p = "fulmen_engine_"
    assert after[p + "generation_tokens_total"] - before[p + "generation_tokens_total"] >= 2
    assert after[p + "prompt_tokens_total"] > before[p + "prompt_tokens_total"]
    # the second request reused the shared system prompt's blocks
    hits = after[p + "prefix_cache_hit_tokens_total"] - before[p + "prefix_cache_hit_tokens_total"]
    assert hits >= 64
    assert (
        after[p + "prefix_cache_miss_tokens_total"] > before[p + "prefix_cache_miss_tokens_total"]
    )
    assert 0 < after[p + "prefix_cache_bytes"] <= after[p + "prefix_cache_max_bytes"]
    assert after[p + "generation_tokens_per_second"] > 0
    assert after[p + "queue_length"] == 0 and after[p + "running_sequences"] == 0
    # Admission: each request counted once, its wait summed (the queue was empty: no more
    # than a step's worth each).
    admitted = after[p + "admitted_requests_total"] - before[p + "admitted_requests_total"]
    assert admitted == 2
    waited = after[p + "queue_wait_seconds_total"] - before[p + "queue_wait_seconds_total"]
    assert 0 <= waited < 30
    assert after[p + "max_batch"] == 8  # the fixture's --max-batch
    # Three choices of one request decode together: three rows a decode pass.
    chat(engine, max_tokens=4, n=3, temperature=1.0, seed=1, ignore_eos=True)
    again = _metrics(engine)
    passes = again[p + "decode_passes_total"] - after[p + "decode_passes_total"]
    rows = again[p + "decode_rows_total"] - after[p + "decode_rows_total"]
    assert passes == 3 and rows == 9


def test_a_release_serves_its_adapter_version_to_its_arm(
    engine: EngineProcess, tool_adapter: Path, tmp_path: Path
) -> None:
    """The gateway loads a release's adapter version into the engine; its arm's sessions get it.

    The candidate is the tool-calling adapter, recorded as a model version of a run in the
    store; the incumbent is the base model. A session the hash sends to the candidate gets a
    tool call, one sent to the incumbent the base model's reply.
    """
    from fulmen.gateway import GatewayConfig, create_app
    from fulmen.gateway.capture_config import CaptureConfig, SessionKeyConfig
    from fulmen.gateway.release_config import ReleaseConfig
    from fulmen.store import open_store
    from fulmen.types import ModelKind, ModelVersion, Run
    from fulmen.types.releases import ReleaseArm
    from tests.gateway.scripted_upstream import serve_app

    async def main() -> None:
        store = await open_store(f"sqlite:///{tmp_path / 'rel.db'}", watchdog_interval=None)
        await store.start_run(Run(run_id="r", name="r", started_at=1.0))
        adapter = ModelVersion(
            run_id="r", version=1, step=1, kind=ModelKind.ADAPTER, path=str(tool_adapter)
        )
        await store.add_model_version(adapter)
        release = ReleaseConfig.model_validate(
            {"name": "weather", "incumbent": "tiny", "candidate": {"run_id": "r", "version": 1},
             "share": 0.5}
        )  # fmt: skip
        capture = CaptureConfig(session=SessionKeyConfig(header="x-session-id"))
        config = GatewayConfig(capture=capture, release=release, read_timeout_s=120)
        app = create_app(store, [engine.base_url], config=config)
        try:
            async with serve_app(app) as url, httpx.AsyncClient(timeout=120) as client:
                router = app.state.gateway.release
                sessions = {router.arm_of(f"s{i}"): f"s{i}" for i in range(20)}
                body = {"model": "any", "messages": MESSAGES, "tools": TOOLS,
                        "temperature": 0, "max_tokens": 40}  # fmt: skip
                finish = {}
                for arm, session in sessions.items():
                    reply = await client.post(
                        f"{url}/v1/chat/completions", json=body, headers={"x-session-id": session}
                    )
                    assert reply.status_code == 200, reply.text
                    finish[arm] = reply.json()["choices"][0]["finish_reason"]
                assert finish[ReleaseArm.CANDIDATE] == "tool_calls"
                assert finish[ReleaseArm.INCUMBENT] != "tool_calls"
        finally:
            await store.aclose()
            await engine.unload_adapter("r-v1")

    asyncio.run(main())
