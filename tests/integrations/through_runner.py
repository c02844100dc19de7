"""Run a framework agent as a ``@rollout`` through fulmen's real Runner, against the gateway.

Each framework test enqueues one rollout, lets a ``Runner`` claim and run it (the agent's LLM
points at the gateway's rollout-specific URL), and reads the attempt back from the store with the
adapter: its calls, its spans, its reward, and the agent each call is attributed to.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from fulmen.agent.config import RunnerConfig
from fulmen.agent.runner import Runner
from fulmen.tracing import rewards_from_spans
from fulmen.tracing.instrumentation import FRAMEWORKS
from fulmen.transitions.signals import read_signals
from fulmen.transitions.trajectory import AttemptRecords, load_attempt
from fulmen.types import LLMResource, ResourcesCreate, RolloutCreate
from tests.gateway.conftest import Running

__all__ = ["agent_names", "assert_reward", "assert_token_level", "instrumentation", "run_one"]


def instrumentation(framework: str, instrumented: bool) -> list[str]:
    """The runner's ``frameworks`` option: ``[framework]`` (skip if its instrumentor is missing)."""
    if not instrumented:
        return []
    _, module, _ = FRAMEWORKS[framework]
    if not _has(module):
        pytest.skip(f"{module} is not installed")
    return [framework]


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


async def run_one(
    gw: Running,
    agent: Any,
    frameworks: list[str],
    task: dict[str, Any],
    **runner_options: Any,
) -> AttemptRecords:
    """Enqueue ``task``, run ``agent`` on it with a real Runner, return the stored attempt.

    ``runner_options`` are further ``RunnerConfig`` fields (``sync_isolation``, ...).
    """
    await gw.store.add_resources(
        ResourcesCreate(
            resources={"llm": LLMResource(base_url="http://unused/v1", model="tiny-model")}
        )
    )
    (rollout,) = await gw.store.enqueue([RolloutCreate(input=task)])
    config = RunnerConfig(
        concurrency=1,
        gateway_url=gw.url,
        frameworks=frameworks,
        heartbeat_interval=0.1,
        poll_interval=0.02,
        span_interval=0.02,
        **runner_options,
    )
    runner = Runner(gw.store, agent, config)
    stats = await runner.run(until_idle=True)
    await gw.gateway.flush()
    assert stats.succeeded == 1, stats
    return await load_attempt(gw.store, rollout.rollout_id)


def assert_token_level(records: AttemptRecords, texts: list[str] | None = None) -> None:
    """Every call of the attempt is token-level: prompt and completion ids, one logprob each."""
    assert records.calls
    for call in records.calls:
        choice = call.choices[0]
        assert call.is_token_level and call.attempt_id == records.attempt_id
        assert call.prompt_token_ids and choice.token_ids and choice.logprobs
        assert len(choice.logprobs) == len(choice.token_ids)
    if texts is not None:
        assert [c.choices[0].text for c in records.calls] == texts


def assert_reward(records: AttemptRecords, reward: float) -> None:
    """The rollout function's return value is the attempt's stored reward."""
    assert rewards_from_spans(records.spans) == {"reward": reward}
    assert records.final_reward == reward


def agent_names(records: AttemptRecords) -> list[str | None]:
    """The agent each call (store order) is attributed to, as fulmen.transitions reads it."""
    return list(read_signals(records.calls, records.spans).agent_names)
