"""The 0.x names outside a run: resources, decorators, emitters, trainer keywords, APO."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import fulmen.compat.agentlightning as agl
from fulmen.compat.agentlightning.agent_match import agent_patterns
from fulmen.compat.agentlightning.resources import resource_to_fulmen
from fulmen.compat.agentlightning.types import config_to_fulmen
from fulmen.types import AttemptStatus, LLMResource
from fulmen.types import PromptTemplate as FulmenPromptTemplate

TOY = Path(__file__).resolve().parents[3] / "examples" / "toy" / "config.yaml"


def test_proxy_llm_routes_as_0x_documented(caplog: pytest.LogCaptureFixture) -> None:
    proxy = agl.ProxyLLM(endpoint="http://gw:9/v1/", model="m")
    assert proxy.get_base_url("r1", "a1") == "http://gw:9/rollout/r1/attempt/a1/v1"
    assert agl.ProxyLLM(endpoint="http://gw:9", model="m").get_base_url("r", "a") == (
        "http://gw:9/rollout/r/attempt/a"
    )
    with pytest.raises(ValueError, match="both"):
        proxy.get_base_url("r1", None)
    with caplog.at_level(logging.WARNING):
        assert proxy.endpoint == "http://gw:9/v1/"
    assert "not recorded" in caplog.text


def test_prompt_template_is_a_fulmen_prompt() -> None:
    prompt = agl.PromptTemplate(template="Room for {n} at {time}", engine="f-string")
    assert isinstance(prompt, FulmenPromptTemplate)
    assert prompt.format(n=3, time="10:00", unused=1) == "Room for 3 at 10:00"
    stored = resource_to_fulmen("p", prompt)
    assert type(stored) is FulmenPromptTemplate and stored.template == prompt.template
    with pytest.raises(agl.NotSupported, match=r"str\.format"):
        agl.PromptTemplate(template="{{ x }}", engine="jinja")
    llm = resource_to_fulmen("l", agl.LLM(endpoint="http://x/v1", model="m", api_key="k"))
    assert llm == LLMResource(base_url="http://x/v1", model="m", api_key="k")


def test_decorators_check_signatures_as_0x() -> None:
    with pytest.raises(NotImplementedError, match=r"no 0\.x pattern"):
        agl.rollout(lambda x, y: 0.0)
    with pytest.raises(ValueError, match="'llm'"):
        agl.llm_rollout(lambda task, prompt_template: 0.0)

    @agl.prompt_rollout
    def agent(task: Any, prompt_template: Any) -> float:
        return 2.0

    assert agent("t", None) == 2.0  # still the plain function when called
    assert isinstance(agent, agl.LitAgent) and not agent.is_async()


def test_agent_match_translation() -> None:
    assert agent_patterns("write") == ("*write*",)
    assert agent_patterns("^write_query$|check") == ("write_query", "*check*")
    with pytest.raises(agl.NotSupported, match="fnmatch"):
        agent_patterns("write.*query")


def test_retry_config_translation() -> None:
    default = config_to_fulmen(None)
    assert default.retry_on == frozenset() and default.max_attempts == 1
    config = config_to_fulmen(
        agl.RolloutConfig(
            timeout_seconds=5, unresponsive_seconds=7, max_attempts=3,
            retry_condition=["failed", "unresponsive"],
        )
    )  # fmt: skip
    assert (config.timeout_s, config.heartbeat_timeout_s, config.max_attempts) == (5, 7, 3)
    assert config.retry_on == {AttemptStatus.FAILED, AttemptStatus.LOST}


def test_emitters_refuse_deferred_spans_and_work_outside_a_rollout() -> None:
    agl.emit_reward(1.0)  # outside a rollout: a logged no-op, as fulmen's emitters
    agl.emit_object({"a": 1})
    with pytest.raises(agl.NotSupported, match="propagate=False"):
        agl.emit_reward(1.0, propagate=False)
    with agl.operation(name="search", query="q"):
        pass


def test_trainer_keywords(tmp_path: Path) -> None:
    with pytest.raises(agl.NotSupported, match="tracer"):
        agl.Trainer(tracer=object())
    with pytest.raises(agl.NotSupported, match="config="):
        agl.Trainer(algorithm=agl.APO()).train_config()
    trainer = agl.Trainer(
        config=TOY,
        overrides=[f"run_dir={tmp_path}"],
        algorithm=agl.APO(beam_rounds=2, beam_width=3, branch_factor=2, val_batch_size=6),
        n_runners=5,
        initial_resources={"room_prompt": agl.PromptTemplate(template="{prompt}")},
        adapter=agl.TraceToMessages(),
    )
    config = trainer.train_config()
    assert config.algorithm.name == "apo"
    assert (config.algorithm.rounds, config.algorithm.beam_width) == (2, 3)  # type: ignore[union-attr]
    assert (config.algorithm.branch, config.algorithm.score_tasks) == (2, 6)  # type: ignore[union-attr]
    assert config.algorithm.prompt == "room_prompt"  # type: ignore[union-attr]
    assert config.rollouts.concurrency == 5
    grpo = agl.Trainer(
        config=TOY,
        overrides=[f"run_dir={tmp_path}"],
        adapter=agl.TracerTraceToTriplet(agent_match="write"),
    ).train_config()
    assert grpo.transition_options().agents == ("*write*",)
    by_agent = agl.Trainer(config=TOY, overrides=[f"run_dir={tmp_path}"]).train_config(
        agl.LitAgent(trained_agents="^actor$")
    )
    assert by_agent.transition_options().agents == ("actor",)
    with pytest.raises(agl.NotSupported, match="hosted model"):
        agl.Trainer(
            config=TOY, initial_resources={"main_llm": agl.LLM(endpoint="http://x", model="m")}
        )._seed_prompts(grpo)


def test_0x_names_without_a_counterpart_say_what_to_use() -> None:
    with pytest.raises(agl.NotSupported, match=r"LightningStore\.open"):
        _ = agl.LightningStoreClient
    with pytest.raises(AttributeError):
        _ = agl.NoSuchName  # type: ignore[attr-defined]
