"""Prompt versions run through a real runner on a SQLite store: the agent gets ``prompt`` by
name, scores come back per task, and scoring again does not run the rollouts twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fulmen.agent.runner import Runner
from fulmen.prompts import load_prompt_versions, publish_prompt, record_scores, score_prompt
from fulmen.store import Store, open_store
from fulmen.types import PromptLineage, PromptScore, PromptTemplate, RolloutQuery

FAST = {"heartbeat_interval": 0.1, "poll_interval": 0.02, "span_interval": 0.02}
TASKS = [(f"t{i}", {"q": f"q{i}", "word": w}) for i, w in enumerate(["alpha", "beta", "alpha"])]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(f"sqlite:///{tmp_path / 'p.db'}", watchdog_interval=0.05) as s:
        yield s


async def run_until_idle(store: Store, agent: str) -> int:
    runner = Runner(store, agent, concurrency=4, **FAST)
    return (await runner.run(until_idle=True)).claimed


@pytest.mark.parametrize("agent", ["word_agent", "sync_word_agent"])
async def test_agent_receives_each_version_and_scores_follow_its_text(
    store: Store, agent: str
) -> None:
    base = PromptTemplate(instructions="Say alpha.", template="{q}")
    v1 = await publish_prompt(store, "prompt", base)
    child = base.model_copy(
        update={"instructions": "Say alpha or beta.", "lineage": PromptLineage(parent=1)}
    )
    v2 = await publish_prompt(store, "prompt", child)
    target = f"tests.prompts.agents:{agent}"

    async def score(version: int) -> float:
        prefix = f"score-{agent}-v{version}"
        pending = score_prompt(store, version, TASKS, name="prompt", id_prefix=prefix,
                               timeout_s=30)  # fmt: skip
        scoring = asyncio.ensure_future(pending)
        await asyncio.sleep(0.1)
        await run_until_idle(store, target)
        result = await scoring
        assert result.instances == {"t0": 1.0, "t1": 1.0 if version == 2 else 0.0, "t2": 1.0}
        return result.score

    assert await score(v1.version) == pytest.approx(2 / 3)
    assert await score(v2.version) == pytest.approx(1.0)
    # scoring again finds the finished rollouts: nothing new is queued or run
    again = await score_prompt(store, v2.version, TASKS, name="prompt",
                               id_prefix=f"score-{agent}-v2", timeout_s=5)  # fmt: skip
    assert again.score == 1.0
    assert len((await store.query_rollouts(RolloutQuery(limit=100))).items) == 6


async def test_recorded_scores_join_their_versions(store: Store) -> None:
    v1 = await publish_prompt(store, "prompt", PromptTemplate(template="{q}"))
    v2 = await publish_prompt(
        store, "prompt", PromptTemplate(template="Q: {q}", lineage=PromptLineage(parent=1))
    )
    await record_scores(
        store,
        [PromptScore(version=v2.version, name="prompt", score=0.5)],
        base=v1.version,
        resources_id="scores-1",
    )
    again = await record_scores(
        store,
        [PromptScore(version=v2.version, name="prompt", score=0.5)],
        base=v1.version,
        resources_id="scores-1",
    )
    assert again.version == 3  # a retried write is stored once
    versions = await load_prompt_versions(store)
    assert [(v.ref, v.score, v.republished_in) for v in versions] == [
        ("prompt@1", None, [3]),
        ("prompt@2", 0.5, []),
    ]
    latest = await store.latest_resources()
    assert latest is not None and latest.resources["prompt"] == PromptTemplate(template="{q}")
