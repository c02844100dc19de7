"""The 0.x names outside a run: resources, decorators, emitters, trainer keywords, APO."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import fulmen.compat.agentlightning as agl
from fulmen.compat.agentlightning.agent_match import agent_patterns
from fulmen.compat.agentlightning.resources import resource_to_fulmen
from fulmen.compat.agentlightning.rollouts import config_to_fulmen
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


def test_setup_logging_configures_both_loggers_once(
    keep_logging: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "agl.log"
    agl.setup_logging("DEBUG", files=str(log), submodule_levels={"fulmen.train": "WARNING"})
    agl.setup_logging("DEBUG", files=str(log))  # a second call adds no second handler
    for name in ("fulmen", "agentlightning"):
        handlers = logging.getLogger(name).handlers
        assert len([h for h in handlers if isinstance(h, logging.FileHandler)]) == 1
        assert logging.getLogger(name).level == logging.DEBUG
    assert logging.getLogger("fulmen.train").level == logging.WARNING
    logging.getLogger("agentlightning.aoai").info("hello from the user's logger")
    assert "hello from the user's logger" in log.read_text()
    assert "hello from the user's logger" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Invalid log level"):
        agl.setup_module_logging("LOUD")


def test_parquet_records_become_native_tasks(tmp_path: Path) -> None:
    from fulmen.compat.agentlightning.datasets import task_list

    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "t.parquet"
    pd.DataFrame([{"q": "a", "answers": ["x", "y"], "n": 3, "w": 0.5}]).to_parquet(path)
    records = pd.read_parquet(path).to_dict("records")
    assert type(records[0]["answers"]).__name__ == "ndarray"  # what 0.x scripts passed
    (task,) = task_list(records, "train_dataset") or []
    assert task == {"q": "a", "answers": ["x", "y"], "n": 3, "w": 0.5}
    assert type(task["answers"]) is list and type(task["n"]) is int
    with pytest.raises(ValueError, match=r"train_dataset\[0\]\['w'\] is nan.*fillna"):
        task_list([{"w": float("nan")}], "train_dataset")
    with pytest.raises(ValueError, match=r"val_dataset\[0\] is a object"):
        task_list([object()], "val_dataset")
    with pytest.raises(TypeError, match="not a string"):
        task_list("http://localhost:9999/", "train_dataset")


def test_trace_to_messages_reads_the_gateway_records() -> None:
    from fulmen.compat.agentlightning.spans import call_span
    from fulmen.types import LLMCall, LLMChoice

    request = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }
    reply = {"choices": [{"message": {"role": "assistant", "content": "yo", "tool_calls": None}}]}
    call = LLMCall(
        call_id="call-1", rollout_id="r", attempt_id="a", request=request, response=reply,
        choices=[LLMChoice(text="yo")], started_at=1.0, latency_s=0.5, sequence=3,
    )  # fmt: skip
    span = call_span(call)
    assert span.name == "openai.chat.completion" and span.sequence_id == 3
    assert span.attributes["gen_ai.prompt.0.content"] == "hi"
    assert span.attributes["gen_ai.completion.0.content"] == "yo"
    (messages,) = agl.TraceToMessages().adapt(
        [span, agl.Span.model_validate(span.model_dump() | {"attributes": {}})]
    )
    assert messages["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo", "tool_calls": None},
    ]
    assert messages["tools"] == request["tools"]
    with pytest.raises(agl.NotSupported, match="responses call"):
        agl.TraceToMessages().adapt([call_span(call.model_copy(update={"endpoint": "responses"}))])
    with pytest.raises(agl.NotSupported, match=r"TracerTraceToTriplet\.adapt"):
        agl.TracerTraceToTriplet().adapt([span])


def test_algorithm_base_as_0x() -> None:
    import random

    from fulmen.compat.agentlightning.algorithm.utils import batch_iter_over_dataset

    random.seed(0)
    batches = batch_iter_over_dataset(list(range(5)), 2)
    first = [next(batches) for _ in range(5)]
    # a pass gives every task once before any repeats: the first two batches are 4 tasks
    assert len({*first[0], *first[1]}) == 4
    assert all(len(b) == 2 for b in first)
    assert sorted(next(batch_iter_over_dataset([1, 2], 5))) == [1, 2]
    algorithm = agl.Algorithm()
    with pytest.raises(ValueError, match="Store has not been set"):
        algorithm.get_store()
    with pytest.raises(NotImplementedError):
        algorithm.run()

    @agl.algo
    async def only_store(*, store: Any) -> str:
        return store

    only_store.set_store("the store")
    assert asyncio.run(only_store.run()) == "the store" and only_store.is_async()
    with pytest.raises(TypeError, match="train_dataset is provided"):
        only_store.run(train_dataset=[1])
    assert only_store.fulmen_section() is None and agl.VERL({}).fulmen_section() == {"name": "grpo"}


def test_fit_refuses_the_legacy_server_form_and_apo_without_val() -> None:
    with pytest.raises(agl.NotSupported, match=r"Trainer\.fit\(agent, 'http://x:9/'\).*legacy"):
        agl.Trainer().fit(agl.LitAgent(), "http://x:9/")
    with pytest.raises(agl.NotSupported, match="dev_data"):
        agl.Trainer().fit_v0(agl.LitAgent(), [1], dev_data=[1])
    with pytest.raises(ValueError, match="val_dataset is required for APO"):
        agl.Trainer(algorithm=agl.APO(), config=TOY).fit(agl.LitAgent(), [{"prompt": "x"}])
    with pytest.raises(TypeError, match="FastAlgorithm"):
        agl.Trainer(algorithm=agl.APO(), config=TOY).dev(agl.LitAgent(), [1])
