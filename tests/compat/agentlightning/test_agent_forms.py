"""Every 0.x agent form through fulmen's real Runner and gateway (scripted model, no engine).

Class and decorator forms, sync and async, with an LLM and a prompt resource: the rollout
method gets 0.x's arguments, its call is recorded for its own attempt, the reward it returns
or emits is the rollout's, and validation rollouts reach ``validation_rollout``.
"""

from __future__ import annotations

from typing import Any

import pytest

import fulmen.compat.agentlightning as agl
from fulmen.agent.config import RunnerConfig
from fulmen.agent.runner import Runner
from fulmen.tracing import rewards_from_spans
from fulmen.transitions.trajectory import AttemptRecords, load_attempt
from fulmen.types import LLMResource, Mode, ResourcesCreate, RolloutCreate
from tests.compat.agentlightning import toy_agents
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Reply

TASK = {"id": "t0", "prompt": "write a"}


async def run(gw: Running, agent: Any, *, mode: Mode = Mode.TRAIN) -> AttemptRecords:
    gw.script.replies.append(Reply(content="aaaa"))  # score 4/8
    llm = LLMResource(base_url="http://unused/v1", model="tiny-model")
    await gw.store.add_resources(
        ResourcesCreate(resources={"llm": llm, "prompt_template": toy_agents.TOY_PROMPT})
    )
    (rollout,) = await gw.store.enqueue([RolloutCreate(input=TASK, mode=mode)])
    config = RunnerConfig(
        concurrency=1, gateway_url=gw.url, heartbeat_interval=0.1, poll_interval=0.02,
        span_interval=0.02, sync_isolation="thread",
    )  # fmt: skip
    stats = await Runner(gw.store, agent, config).run(until_idle=True)
    await gw.gateway.flush()
    assert stats.succeeded == 1, stats
    return await load_attempt(gw.store, rollout.rollout_id)


@pytest.mark.parametrize(
    "agent",
    [
        toy_agents.ToyLitAgent(),
        toy_agents.ToySyncLitAgent(),
        toy_agents.toy_sync_function,
        toy_agents.toy_async_function,
    ],
    ids=["class-async", "class-sync", "function-sync", "function-async"],
)
async def test_each_form_records_its_call_and_reward(gw: Running, agent: Any) -> None:
    records = await run(gw, agent)
    assert len(records.calls) == 1
    assert records.calls[0].attempt_id is not None
    assert records.calls[0].prompt_token_ids  # token-level: trainable
    assert rewards_from_spans(records.spans) == {"reward": 0.5}


async def test_a_class_named_by_its_type_is_built_without_arguments(gw: Running) -> None:
    records = await run(gw, toy_agents.ToySyncLitAgent)
    assert rewards_from_spans(records.spans) == {"reward": 0.5}


class ModeAgent(agl.LitAgent[dict[str, Any]]):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str | None, str]] = []

    def training_rollout(self, task: Any, resources: Any, rollout: Any) -> float:
        self.seen.append(("train", rollout.mode, type(resources["main_llm"]).__name__))
        return 0.0

    def validation_rollout(self, task: Any, resources: Any, rollout: Any) -> float:
        self.seen.append(("val", rollout.mode, resources["prompt_template"].format(**task)))
        return 1.0


async def test_validation_rollouts_reach_validation_rollout(gw: Running) -> None:
    agent = ModeAgent()
    gw.script.replies.clear()
    await run(gw, agent, mode=Mode.VAL)
    await run(gw, agent, mode=Mode.TRAIN)
    assert agent.seen == [("val", "val", "write a"), ("train", "train", "ProxyLLM")]


class Hooked(agl.LitAgent[Any]):
    def rollout(self, task: Any, resources: Any, rollout: Any) -> float:
        return 1.0

    def on_rollout_start(self, task: Any, runner: Any, tracer: Any) -> None:
        pass


class SpanReturner(agl.LitAgent[Any]):
    def rollout(self, task: Any, resources: Any, rollout: Any) -> list[Any]:
        return []


def test_refusals_say_what_to_change() -> None:
    from fulmen.agent.api import RolloutTarget

    with pytest.raises(agl.NotSupported, match="on_rollout_start"):
        RolloutTarget.of(Hooked())
    with pytest.raises(agl.NotSupported, match="without a rollout method"):
        RolloutTarget.of(agl.LitAgent())
    with pytest.raises(agl.NotSupported, match=r"LitAgent\.runner"):
        _ = Hooked().runner
    bridge = RolloutTarget.of(SpanReturner()).obj
    from fulmen.compat.agentlightning.bridge import _result

    with pytest.raises(agl.NotSupported, match="list of spans"):
        _result(bridge.agent, [])


async def test_emitted_objects_and_messages_read_back_through_the_store_facade(
    gw: Running,
) -> None:
    records = await run(gw, toy_agents.ToyLitAgent())
    store = agl.LightningStore(gw.store)
    spans = await store.query_spans(records.rollout_id, "latest")
    objects = [agl.get_object_value(s) for s in spans if agl.get_object_value(s) is not None]
    messages = [agl.get_message_value(s) for s in spans if agl.get_message_value(s)]
    assert objects == [{"answer": "aaaa", "mode": "train"}]
    assert messages == ["answered 4 characters"]
    assert agl.find_final_reward(spans) == 0.5
    (reward_span,) = agl.find_reward_spans(spans)
    assert [(d.name, d.value) for d in agl.get_rewards_from_span(reward_span)] == [("reward", 0.5)]
    # the model call is among the spans, as 0.x's tracer put it there
    (call,) = [s for s in spans if s.name == "openai.chat.completion"]
    assert call.attributes["gen_ai.completion.0.content"] == "aaaa"
