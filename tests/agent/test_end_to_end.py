"""Runner + gateway + the real ``openai`` client against a scripted vLLM-like upstream.

Every call lands in the store with token ids through the rollout-specific base URL, and with
OpenInference's openai instrumentation the calls are attributed to the ``as_agent`` that made
them through response ids (never clocks).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from fulmen.agent.api import rollout
from fulmen.agent.runner import Runner
from fulmen.store import Store
from fulmen.tracing import agent_names_by_response_id, as_agent, rewards_from_spans
from fulmen.types import RolloutCreate
from tests.agent.conftest import FAST

openai = pytest.importorskip("openai")
gateway = pytest.importorskip("fulmen.gateway")
upstream = pytest.importorskip("tests.gateway.scripted_upstream")


@asynccontextmanager
async def serving_gateway(store: Store) -> AsyncIterator[tuple[str, Any]]:
    script = upstream.Script()
    async with upstream.serve_app(upstream.create_upstream_app(script)) as upstream_root:
        config = gateway.GatewayConfig(flush_interval_s=0.01, connect_retries=0)
        app = gateway.create_app(store, [f"{upstream_root}/v1"], config=config)
        async with upstream.serve_app(app) as url:
            yield url, app.state.gateway


@rollout
async def two_agents(task: Any, llm: Any) -> float:
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    async with client:
        with as_agent("planner"):
            plan = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": f"plan {task['x']}"}]
            )
        async with as_agent("critic"):
            await client.chat.completions.create(
                model=llm.model,
                messages=[{"role": "user", "content": plan.choices[0].message.content or ""}],
            )
    return float(task["x"])


@pytest.mark.parametrize(
    ("agent", "frameworks"),
    [
        (two_agents, ["openai"]),
        (two_agents, []),
        # sync, in worker processes: each instruments the openai its agent module imported
        ("tests.agent.openai_agents:sync_two_agents", None),
    ],
    ids=["async-instrumented", "async-plain", "sync-process-instrumented"],
)
async def test_calls_are_recorded_and_attributed_to_agents(
    store: Store, agent: Any, frameworks: list[str] | None
) -> None:
    if frameworks != []:
        pytest.importorskip("openinference.instrumentation.openai")
    rollouts = await store.enqueue([RolloutCreate(input={"x": i}) for i in range(4)])
    async with serving_gateway(store) as (url, gw):
        runner = Runner(store, agent, concurrency=4, gateway_url=url, frameworks=frameworks, **FAST)
        stats = await runner.run(until_idle=True)
        await gw.flush()
    assert stats.succeeded == 4
    for r in rollouts:
        calls = (await store.query_llm_calls(r.rollout_id)).items
        spans = (await store.query_spans(r.rollout_id)).items
        assert len(calls) == 2 and all(c.is_token_level and c.prompt_token_ids for c in calls)
        assert rewards_from_spans(spans) == {"reward": float(r.input["x"])}  # type: ignore[index]
        names = agent_names_by_response_id(spans)
        if frameworks != []:
            ordered = sorted(calls, key=lambda c: c.sequence)
            assert [names[c.response_id or ""] for c in ordered] == ["planner", "critic"]
        else:
            assert names == {}  # without instrumentation every call belongs to the rollout
