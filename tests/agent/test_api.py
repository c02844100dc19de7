"""The rollout API: arguments by parameter name, the llm resource, results, the Agent class."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fulmen.agent.api import Agent, RolloutTarget, bind_arguments, check_result, rollout
from fulmen.agent.context import LLM, RolloutContext
from fulmen.errors import ConfigError
from fulmen.types import (
    Attempt,
    AttemptStatus,
    LLMResource,
    Mode,
    PromptTemplate,
    Resources,
    Rollout,
    RolloutConfig,
    RolloutStatus,
)

NOW = datetime.now(UTC)


def make_context(mode: Mode = Mode.TRAIN, gateway: str | None = "http://gw:9/") -> RolloutContext:
    rollout_ = Rollout(
        rollout_id="ro-1",
        input={"q": "2+2"},
        mode=mode,
        resources_version=3,
        status=RolloutStatus.RUNNING,
        config=RolloutConfig(),
        position=1,
        enqueued_at=NOW,
    )
    attempt = Attempt(
        attempt_id="at-1",
        rollout_id="ro-1",
        number=1,
        worker_id="w",
        status=AttemptStatus.RUNNING,
        started_at=NOW,
        last_heartbeat_at=NOW,
    )
    resources = Resources(
        version=3,
        resources_id="res",
        resources={
            "llm": LLMResource(
                base_url="http://engine/v1",
                model="policy",
                sampling={
                    "default": {"temperature": 1.0, "top_p": 0.9},
                    "val": {"temperature": 0.0},
                },
            ),
            "judge": LLMResource(base_url="http://judge/v1", model="judge", api_key="sk-j"),
            "prompt": PromptTemplate(template="Q: {q}"),
            "system": PromptTemplate(template="be brief"),
        },
        created_at=NOW,
    )
    return RolloutContext(rollout_, attempt, resources, gateway_url=gateway)


def test_arguments_are_chosen_by_parameter_name() -> None:
    seen: dict[str, Any] = {}

    @rollout
    def agent(question, llm, prompt, system, judge, context, mode, missing=7):
        seen.update(locals())

    args, kwargs = bind_arguments(agent.fn, make_context())
    agent(*args, **kwargs)
    assert seen["question"] == {"q": "2+2"}  # the first parameter is the task
    llm: LLM = seen["llm"]
    assert llm.base_url == "http://gw:9/rollout/ro-1/attempt/at-1/v1"
    assert (llm.model, llm.sampling, llm.is_recorded) == (
        "policy",
        {"temperature": 1.0, "top_p": 0.9},
        True,
    )
    assert seen["prompt"].template.format(**seen["question"]) == "Q: 2+2"
    assert seen["system"].template == "be brief"
    assert seen["judge"].model == "judge" and seen["judge"].base_url.endswith("/attempt/at-1/v1")
    assert seen["context"].rollout_id == "ro-1" and seen["mode"] is Mode.TRAIN
    assert seen["missing"] == 7


def test_val_sampling_and_no_gateway() -> None:
    context = make_context(Mode.VAL, gateway=None)
    llm = context.llm()
    assert llm.sampling == {"temperature": 0.0, "top_p": 0.9}
    assert llm.base_url == "http://engine/v1" and not llm.is_recorded


def test_unknown_parameter_is_a_config_error() -> None:
    def agent(task, weather):
        return 0.0

    with pytest.raises(ConfigError, match="'weather'"):
        bind_arguments(agent, make_context())


def test_ambiguous_llm_is_a_config_error() -> None:
    context = make_context()
    assert context.resources is not None
    resources = dict(context.resources.resources)
    del resources["llm"]
    resources["other"] = LLMResource(base_url="http://o/v1", model="o")
    context = RolloutContext(
        context.rollout,
        context.attempt,
        context.resources.model_copy(update={"resources": resources}),
    )
    with pytest.raises(ConfigError, match="cannot choose"):
        context.llm()


def test_results_are_checked() -> None:
    assert check_result(None) is None
    assert check_result(1) == 1.0
    assert check_result({"a": 1, "b": 0.5}) == {"a": 1.0, "b": 0.5}
    with pytest.raises(ConfigError, match="'a'"):
        check_result({"a": "x"})
    with pytest.raises(ConfigError, match="must return"):
        check_result("1.0")


def test_agent_class_splits_training_and_validation() -> None:
    class Solver(Agent):
        def training_rollout(self, task: Any) -> float:
            return 1.0

        async def validation_rollout(self, task: Any, llm: LLM) -> float:
            return 2.0

    target = RolloutTarget.of(Solver)
    assert target.function_for(Mode.TRAIN)(None) == 1.0
    assert (
        not target.is_async(Mode.TRAIN) and target.is_async(Mode.VAL) and target.is_async(Mode.TEST)
    )

    class Empty(Agent):
        pass

    with pytest.raises(ConfigError, match="training_rollout"):
        RolloutTarget.of(Empty())


def test_import_paths_are_found_for_module_level_functions_only() -> None:
    from tests.agent import sample_agents

    assert (
        RolloutTarget.of(sample_agents.sync_reward).spec == "tests.agent.sample_agents:sync_reward"
    )
    assert RolloutTarget.of(lambda task: 0.0).spec is None
    target = RolloutTarget.of("tests.agent.sample_agents:two_modes")
    assert target.spec == "tests.agent.sample_agents:two_modes"
    with pytest.raises(ConfigError, match="cannot import"):
        RolloutTarget.of("tests.agent.sample_agents:nope")
