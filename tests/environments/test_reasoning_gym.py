"""Reasoning Gym through fulmen: its datasets as tasks, its scorer as the reward, on the tiny model.

The splits: drawn from Reasoning Gym's own generators, the same every time, and never sharing
a question. The reward: each dataset's own ``score_answer`` on the answer the agent extracted.
The run: two GRPO steps of ``examples/reasoning_gym/config.yaml`` on the tiny model, whose
stored rewards are what the dataset's scorer gives the recorded replies.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("reasoning_gym")

import reasoning_gym

from fulmen.environments.config import EnvironmentAdapter, ReasoningGymConfig
from fulmen.environments.reasoning_gym import prompt_messages, reasoning_gym_tasks, score_reply
from fulmen.errors import ConfigError

EXAMPLE = Path(__file__).parents[2] / "examples" / "reasoning_gym" / "config.yaml"


def _config(**raw: Any) -> ReasoningGymConfig:
    config = EnvironmentAdapter.validate_python({"library": "reasoning_gym", **raw})
    assert isinstance(config, ReasoningGymConfig)
    return config


ARITHMETIC = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def test_held_out_split_never_shares_a_question_with_training() -> None:
    # One-digit sums of two terms: few enough problems that independent draws would repeat.
    config = _config(dataset="basic_arithmetic", config=ARITHMETIC, train_size=150, val_size=40)
    train, val = reasoning_gym_tasks(config, "train"), reasoning_gym_tasks(config, "val")
    assert (len(train), len(val)) == (150, 40)
    questions = [t["question"] for t in train + val]
    assert len(set(questions)) == len(questions)
    assert reasoning_gym_tasks(config, "val") == val  # the same split in any process
    assert len({t["id"] for t in train + val}) == 190


def test_a_space_too_small_for_the_sizes_is_refused() -> None:
    # count_bits up to 20 has 20 different questions.
    config = _config(dataset="count_bits", config={"max_n": 20}, train_size=15, val_size=10)
    with pytest.raises(ConfigError, match="only 10 distinct train problems"):
        reasoning_gym_tasks(config, "train")


def test_unknown_dataset_names_the_ones_there_are() -> None:
    with pytest.raises(ConfigError, match=r"no dataset 'basic_arithmetik'.*basic_arithmetic"):
        reasoning_gym_tasks(_config(dataset="basic_arithmetik"), "train")


def test_composite_weights_and_curriculum_levels_reach_the_datasets() -> None:
    config = _config(
        datasets={
            "chain_sum": {"weight": 3, "curriculum": {"*": 2}},
            "leg_counting": {"weight": 1, "config": {"min_animals": 1, "max_animals": 2}},
        },
        train_size=200,
        val_size=0,
    )
    tasks = reasoning_gym_tasks(config, "train")
    by_source = Counter(t["reasoning_gym"]["dataset"] for t in tasks)
    assert by_source["chain_sum"] > 2 * by_source["leg_counting"] > 0
    # Reasoning Gym's own curriculum chose chain_sum's config at level 2.
    curriculum = reasoning_gym.factory.create_curriculum("chain_sum")
    for attribute in curriculum.attributes:
        curriculum.set_attr_level(attribute, 2)
    expected = {
        k: v
        for k, v in vars(curriculum.generate_configuration()).items()
        if k not in ("seed", "size")
    }
    chain = next(t for t in tasks if t["reasoning_gym"]["dataset"] == "chain_sum")
    assert chain["reasoning_gym"]["config"] == expected
    legs = next(t for t in tasks if t["reasoning_gym"]["dataset"] == "leg_counting")
    assert legs["reasoning_gym"]["config"] == {"min_animals": 1, "max_animals": 2}


def test_reward_is_the_datasets_own_score_of_the_extracted_answer() -> None:
    config = _config(dataset="leg_counting", train_size=5, val_size=0)
    task = reasoning_gym_tasks(config, "train")[0]
    dataset = reasoning_gym.create_dataset("leg_counting")
    entry = {k: task[k] for k in ("question", "answer", "metadata")}
    for reply, answer in [
        (f"thinking... <answer>{task['answer']}</answer>", task["answer"]),
        (f"<answer>{task['answer']}0</answer>", f"{task['answer']}0"),
        ("no tag: " + task["answer"], None),
    ]:
        assert score_reply(task, reply) == dataset.score_answer(answer, entry)
    assert score_reply(task, f"<answer>{task['answer']}</answer>") == 1.0
    raw = reasoning_gym_tasks(_config(dataset="leg_counting", answer_format="raw"), "train")[0]
    assert score_reply(raw, f" {raw['answer']}\n") == 1.0


def test_worked_examples_come_before_every_question_and_are_never_a_task() -> None:
    sizes = {"config": ARITHMETIC, "train_size": 60, "val_size": 20}
    config = _config(dataset="basic_arithmetic", examples=3, **sizes)
    train, val = reasoning_gym_tasks(config, "train"), reasoning_gym_tasks(config, "val")
    examples = train[0]["agent"]["examples"]
    assert len(examples) == 3 and all(t["agent"]["examples"] == examples for t in train + val)
    shown = {e["question"] for e in examples}
    assert not shown & {t["question"] for t in train + val}
    assert all(e["answer"].startswith("<answer>") for e in examples)  # the reply's format
    chat = prompt_messages(val[0])
    assert [m["role"] for m in chat] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert (
        chat[1]["content"] == examples[0]["question"] and chat[-1]["content"] == val[0]["question"]
    )
    raw = reasoning_gym_tasks(
        _config(dataset="basic_arithmetic", answer_format="raw", examples=1, **sizes), "val"
    )
    answer = raw[0]["agent"]["examples"][0]["answer"]
    assert answer and not answer.startswith("<")  # the bare answer
    # Without examples the tasks are what they were: the splits do not move.
    plain = _config(dataset="basic_arithmetic", **sizes)
    assert "examples" not in reasoning_gym_tasks(plain, "val")[0]["agent"]
    assert [t["question"] for t in reasoning_gym_tasks(plain, "val")] == [
        t["question"] for t in val
    ]


@pytest.mark.slow
def test_example_trains_on_the_tiny_model_with_the_datasets_scorer(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts
    from fulmen.trainer.config import load_config
    from fulmen.trainer.metrics import read_metrics
    from fulmen.trainer.trainer import Trainer
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import Mode, RolloutQuery, RolloutStatus

    overrides = [
        f"run_dir={tmp_path}",
        "model=tiny",
        "algorithm.steps=2",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=4",
        "environment.train_size=16",
        "environment.val_size=4",
        "validation.every=2",
        "rollouts.concurrency=8",
        "engine.max_batch=8",
        "environment.examples=1",
        "environment.answer_format=raw",  # the tiny model writes no <answer> tag
    ]
    config = load_config(EXAMPLE, overrides=overrides)
    assert config.agent == "fulmen.environments.reasoning_gym:ReasoningGymAgent"
    Trainer(config).fit()
    steps = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "time/step_s" in r]
    assert [r["rollouts/finished"] for r in steps] == [8.0, 8.0]
    assert any(r["updated"] == 1.0 for r in steps)  # the scorer's partial credit varied

    async def rollouts() -> list[tuple[Any, Any, Any]]:
        out = []
        async with open_store(f"sqlite:///{tmp_path / 'store.db'}", watchdog_interval=None) as s:
            async for rollout in iter_rollouts(s, RolloutQuery(limit=100)):
                assert rollout.status is RolloutStatus.SUCCEEDED, rollout.error
                records = await load_attempt(s, rollout.rollout_id)
                out.append((rollout, records.calls, records.final_reward))
        return out

    found = asyncio.run(rollouts())
    assert Counter(r.mode for r, _, _ in found) == {Mode.TRAIN: 16, Mode.VAL: 8}
    trained = {r.input["question"] for r, _, _ in found if r.mode is Mode.TRAIN}
    held_out = {r.input["question"] for r, _, _ in found if r.mode is Mode.VAL}
    assert not trained & held_out
    for rollout, calls, reward in found:
        (call,) = calls  # one call, recorded at token level
        assert call.is_token_level and call.prompt_token_ids and call.choices[0].token_ids
        assert call.request["messages"] == prompt_messages(rollout.input)  # the worked example
        text = call.response["choices"][0]["message"]["content"] or ""
        assert reward == score_reply(rollout.input, text)
