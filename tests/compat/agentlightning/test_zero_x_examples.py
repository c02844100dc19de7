"""Agent Lightning's own examples and recipes (v0.3.0, v0.2.2) beyond the three tutorials.

Each file of ``zero_x/`` is one of them with only the import line pointing at fulmen. Run as
it is, each either trains (calls recorded, rewards stored, a step or an APO round done) or
stops with a ``NotSupported`` naming what to write; run again with that change, it trains.
Never does one exit quietly having done something else. The prompt-only runs share one tiny
engine (``engine: {kind: endpoint}``); the VERL run starts its own, as it trains weights.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

import fulmen.compat.agentlightning as agl
from fulmen.errors import AgentFailed
from fulmen.store import open_store
from fulmen.tracing import semconv
from fulmen.types import LLMCall, Rollout, RolloutQuery, Span

pytest.importorskip("torch")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tiny_engine: Any) -> None:
    """The environment of a machine whose ``OpenAI()`` reaches no hosted model: its calls get
    a 404 at once (from a path the shared engine does not serve), as in the issue's report."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", tiny_engine.base_url.removesuffix("/v1") + "/hosted/v1")


def example(name: str) -> ModuleType:
    """Import ``zero_x/<name>.py`` afresh (its module-level state starts empty)."""
    full = f"tests.compat.agentlightning.zero_x.{name}"
    sys.modules.pop(full, None)
    return importlib.import_module(full)


def endpoint_config(tmp_path: Path, engine: Any, **extra: Any) -> Path:
    """A fulmen config naming the model and run directory, on the shared tiny engine."""
    config = {
        "model": "tiny",
        "run_dir": str(tmp_path / "run"),
        "engine": {"kind": "endpoint", "url": engine.base_url},
        "rollouts": {"concurrency": 4, "timeout_s": 60},
        **extra,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def read_run(db: Path) -> tuple[list[Rollout], list[Span], list[LLMCall]]:
    """Every rollout of a run's store, with its spans and recorded model calls."""

    async def read() -> tuple[list[Rollout], list[Span], list[LLMCall]]:
        async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
            rollouts = (await store.query_rollouts(RolloutQuery(limit=1000))).items
            spans: list[Span] = []
            calls: list[LLMCall] = []
            for rollout in rollouts:
                spans += (await store.query_spans(rollout.rollout_id)).items
                calls += (await store.query_llm_calls(rollout.rollout_id)).items
            return rollouts, spans, calls

    return asyncio.run(read())


def rewards(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.name == semconv.SPAN_REWARD]


@pytest.fixture
def parquet_tasks(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The recipe's data files: questions with a list column of golden answers."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    rows = [
        {"question": f"What is the capital of France? ({i})", "golden_answers": ["Paris"]}
        for i in range(4)
    ]
    train, val = tmp_path / "train.parquet", tmp_path / "test.parquet"
    pd.DataFrame(rows[:2]).to_parquet(train)
    pd.DataFrame(rows[2:]).to_parquet(val)
    yield train, val


# -- the Search-R1 recipe (v0.3.0): a class agent trained with VERL, no fulmen config ------------


@pytest.mark.slow
def test_search_r1_recipe_refuses_warmup_then_trains_without_a_config(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    parquet_tasks: tuple[Path, Path],
    keep_logging: None,
) -> None:
    module = example("search_r1_agent")
    monkeypatch.chdir(tmp_path)
    config = module.config_train_fast()
    config["data"]["train_files"], config["data"]["val_files"] = map(str, parquet_tasks)
    with pytest.raises(
        agl.NotSupported, match=r"lr_warmup_steps_ratio.*\(lr_warmup_steps_ratio: 0\)"
    ):
        module.train(config)
    del config["actor_rollout_ref"]["actor"]["optim"]["lr_warmup_steps_ratio"]  # as advised
    agent = module.train(config)
    # parquet's numpy arrays reached the agent as lists; both modes ran
    assert {mode for mode, _ in agent.seen} == {"train", "val"}
    assert all(answers == ["Paris"] and type(answers) is list for _, answers in agent.seen)
    run_dir = tmp_path / "checkpoints" / "searchr1_checkpoints"  # trainer.default_local_dir
    rollouts, spans, calls = read_run(run_dir / "store.db")
    train = [r for r in rollouts if r.mode.value == "train"]
    assert len(train) == 4  # one step: train_batch_size 2 x rollout.n 2
    assert all(r.status.value == "succeeded" for r in rollouts)
    assert len(rewards(spans)) == len(rollouts)
    assert calls and all(c.is_token_level for c in calls)
    # the sampling note of the VERL report: the agent asked 500 tokens, the gateway sent 8
    assert {c.request["max_tokens"] for c in calls} == {500}
    assert max(len(c.choices[0].token_ids or []) for c in calls) <= 8
    metrics = (run_dir / "metrics.jsonl").read_text()
    assert '"step": 1' in metrics


# -- the Search-R1 example (v0.2.2): the legacy server form, an async agent on llm.endpoint ------


def test_search_r1_v02_legacy_fit_with_a_url_is_refused(keep_logging: None) -> None:
    module = example("search_r1_v02")
    with pytest.raises(agl.NotSupported, match=r"legacy client/server.*agl\.VERL\(config\)"):
        module.main()
    with pytest.raises(agl.NotSupported, match="legacy"):
        agl.Trainer().fit_v0(module.Searchr1Agent(), "http://localhost:9999/")


def test_search_r1_v02_agent_records_calls_on_llm_endpoint(
    tmp_path: Path, tiny_engine: Any, keep_logging: None
) -> None:
    module = example("search_r1_v02")
    tasks = [
        {"question": f"Capital of France? ({i})", "golden_answers": ["paris"]} for i in range(2)
    ]
    trainer = agl.Trainer(config=endpoint_config(tmp_path, tiny_engine))
    rows = trainer.dev(module.Searchr1Agent(), tasks[:1], val_dataset=tasks[1:])
    assert [(r["mode"], r["status"]) for r in rows] == [
        ("train", "succeeded"),
        ("val", "succeeded"),
    ]
    assert all(r["reward"] == 0.0 for r in rows)  # the @reward span, read back by the algorithm
    assert sorted(module.Searchr1Agent.temperatures) == [0.0, 1.0]  # validation's 0.0
    rollouts, spans, calls = read_run(tmp_path / "run" / "store.db")
    # llm.endpoint is the attempt's recording URL: each call is its rollout's
    assert sorted(c.rollout_id or "" for c in calls) == sorted(r.rollout_id for r in rollouts)
    emitted = [s for s in rewards(spans) if s.attributes[semconv.REWARD_SOURCE] == "emit"]
    assert sorted(s.rollout_id for s in emitted) == sorted(r.rollout_id for r in rollouts)


# -- the Azure capital agent (v0.3.0): a custom Algorithm driven against the store -------------


def capital_tasks() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    countries = [
        ("Japan", "Tokyo"),
        ("France", "Paris"),
        ("Canada", "Ottawa"),
        ("Kenya", "Nairobi"),
    ]
    tasks = [{"input": f"What is the capital of {c}?", "output": o} for c, o in countries]
    return tasks[:3], tasks[3:]


def test_capital_agent_custom_algorithm_runs_against_the_store(
    tmp_path: Path, tiny_engine: Any, keep_logging: None
) -> None:
    module = example("capital_agent")
    train, val = capital_tasks()
    with pytest.raises(agl.NotSupported, match=r"without config=.*model:"):
        module.main(tiny_engine.base_url, train, val)
    algorithm = module.main(
        tiny_engine.base_url, train, val, config=endpoint_config(tmp_path, tiny_engine)
    )
    # run() was driven: two iterations, each fine-tuning on the conversations that
    # TraceToMessages read from the rollouts' spans (two calls a rollout, half kept)
    assert [len(batch) for batch in algorithm.uploaded] == [3, 3]
    assert [len(v) for v in algorithm.val_rewards] == [2, 2]  # one val task, two calls
    for shown in algorithm.uploaded[0]:
        roles = [m["role"] for m in shown["messages"]]
        assert roles in (["system", "user", "assistant"], ["system", "user", "assistant"] * 1
                         + ["user", "assistant"])  # fmt: skip
        assert shown["messages"][0]["content"] == module.SYSTEM
    rollouts, spans, calls = read_run(tmp_path / "run" / "store.db")
    modes = sorted(r.mode.value for r in rollouts)
    assert modes == ["train"] * 6 + ["val"] * 2  # the 3 train tasks twice, the val task twice
    assert all(r.status.value == "succeeded" for r in rollouts)
    assert len(calls) == 2 * len(rollouts) and len(rewards(spans)) == len(rollouts)


async def test_a_driven_algorithm_cannot_point_rollouts_at_another_endpoint() -> None:
    from fulmen.compat.agentlightning.driver import TrainerStore
    from fulmen.store.memory import MemoryStore

    served = agl.LLM(endpoint="http://127.0.0.1:8000/v1", model="tiny")
    store = TrainerStore(MemoryStore(), served=served)
    with pytest.raises(agl.NotSupported, match="would silently go there"):
        await store.add_resources({"main_llm": agl.LLM(endpoint="https://azure/v1", model="m")})
    same = await store.add_resources(
        {"main_llm": agl.LLM(endpoint="http://127.0.0.1:8000", model="m")}
    )
    assert list(same.resources) == ["main_llm"]
    prompt_only = await store.add_resources({"p": agl.PromptTemplate(template="{x}")})
    assert sorted(prompt_only.resources) == ["llm", "p"]  # the served model, for agents taking llm


# -- the APO room selector (v0.3.0): refused, then every rollout failing is an error, then a round


def test_room_selector_apo_refusals_and_failed_rollouts(
    tmp_path: Path, tiny_engine: Any, offline: None, keep_logging: None
) -> None:
    module = example("room_selector")
    with pytest.raises(agl.NotSupported, match=r"APO\) without config=.*model:"):
        module.main()
    # The guide's changes (a config, the engine as critic) with the agent still calling a
    # hosted model: every rollout fails, and the run says so instead of publishing a prompt.
    config = endpoint_config(tmp_path, tiny_engine)
    fast = ["algorithm.critic.sampling.max_tokens=8", "algorithm.editor.sampling.max_tokens=8"]
    with pytest.raises(AgentFailed, match=r"every one of the \d+ rollouts .* failed .*404"):
        module.main(client=None, config=config, overrides=fast)


@pytest.mark.slow
def test_room_selector_apo_scores_prompts_on_val_dataset(
    tmp_path: Path, tiny_engine: Any, keep_logging: None
) -> None:
    module = example("room_selector")
    config = endpoint_config(tmp_path, tiny_engine)
    fast = ["algorithm.critic.sampling.max_tokens=8", "algorithm.editor.sampling.max_tokens=8"]
    (round_one,) = module.main(agent=module.room_selector_llm, client=None, config=config,
                               overrides=fast)  # fmt: skip
    assert round_one["apo-critic/calls"] == 1 and round_one["apo-editor/calls"] == 1
    rollouts, spans, calls = read_run(tmp_path / "run" / "store.db")
    val_ids = {r.input["id"] for r in rollouts if r.mode.value == "val"}
    train_ids = {r.input["id"] for r in rollouts if r.mode.value == "train"}
    assert val_ids == {"room-2", "room-3"}  # the second half: val_dataset
    assert train_ids == {"room-0", "room-1"}  # the minibatch: train_dataset only
    assert all(r.status.value == "succeeded" for r in rollouts)
    assert len(rewards(spans)) == len(rollouts) and calls


# -- the APO custom algorithm (v0.3.0): @algo driven by the trainer ------------------------------


def test_apo_custom_algorithm_scripts(
    tmp_path: Path, tiny_engine: Any, offline: None, keep_logging: None
) -> None:
    module = example("apo_custom")
    with pytest.raises(agl.NotSupported, match=r"LightningStoreClient.*LightningStore\.open"):
        asyncio.run(module.algo_mode())
    with pytest.raises(agl.NotSupported, match="without config="):
        module.trainer_main()
    config = endpoint_config(tmp_path, tiny_engine)
    # as 0.x did, the algorithm stops at a rollout that failed (here: the hosted model)
    with pytest.raises(RuntimeError, match="did not succeed: failed"):
        module.trainer_main(config=config)
    module.trainer_main(
        module.apo_rollout_llm, config=config, overrides=["run_dir=" + str(tmp_path / "r2")]
    )
    assert [p for p, _ in module.results] == module.PROMPTS
    assert module.llm_spans == ["openai.chat.completion"] * 3  # the calls, among the spans
    rollouts, spans, calls = read_run(tmp_path / "r2" / "store.db")
    assert len(rollouts) == 3 and len(calls) == 3 and len(rewards(spans)) == 3
    prompts = [c.request["messages"][0]["content"] for c in calls]  # type: ignore[index]
    assert [p.split(".")[0] for p in prompts] == [p.split(".")[0] for p in module.PROMPTS]


# -- the APO debug script (v0.3.0): runner/tracer refused, Trainer.dev keeps the prompt ---------


def test_apo_debug_refuses_runner_and_keeps_the_dev_prompt(
    tmp_path: Path, tiny_engine: Any, keep_logging: None
) -> None:
    with pytest.raises(agl.NotSupported, match=r"agentlightning\.runner.*\.dev"):
        example("apo_debug")
    debug = example("apo_debug_trainer")
    agent = example("apo_custom").apo_rollout_llm
    with pytest.raises(agl.NotSupported, match="without config="):
        debug.debug_with_trainer(agent)
    rows = debug.debug_with_trainer(agent, config=endpoint_config(tmp_path, tiny_engine))
    assert [r["status"] for r in rows] == ["succeeded", "succeeded"]
    _, _, calls = read_run(tmp_path / "run" / "store.db")
    sent = [c.request["messages"][0]["content"] for c in calls]  # type: ignore[index]
    assert all(s.startswith("You are a helpful assistant. ") for s in sent)  # initial_resources
