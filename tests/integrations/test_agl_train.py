"""The 0.x tutorial agents ``examples/agl_sql`` and ``examples/agl_calc``, under ``fulmen train``.

Each agent file is 0.x code with only its import line changed; its ``config.yaml`` runs two
GRPO steps on the ``tiny`` model with validation on held-out tasks before and after. What must
hold for the path to work: every step ran all its rollouts, each rollout's reward reached the
store, the calls became transitions that reached the update (a step without an update can only
be one where every group scored the same, which the random-weight model makes likely), and
validation ran before and after training. For the SQL agent, ``trained_agents="write"`` (the
config's ``transitions.agents``) must have turned exactly the writing nodes' calls into
transitions and left the checker's out, as the store's records show.

The task sources are checked too: the held-out tasks are many enough to measure on and none is
trained on.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")
pytest.importorskip("autogen_agentchat")

from fulmen.algorithms.grpo.diagnose import no_update_reason
from fulmen.store import open_store
from fulmen.store.reading import iter_rollouts
from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer
from fulmen.transitions.signals import read_signals
from fulmen.transitions.trajectory import load_attempt
from fulmen.types import Mode, RolloutQuery, RolloutStatus
from tests.examples.loading import EXAMPLES, example_modules

STEPS, TASKS_PER_STEP, GROUP, VAL_TASKS = 2, 2, 4, 4
EQUAL_GROUPS = "every rollout in each of"  # the start of no_update_reason's equal-rewards case


def _train(example: str, modules: tuple[str, ...], run_dir: Path) -> list[dict[str, Any]]:
    """Run ``examples/EXAMPLE/config.yaml`` through the real trainer; its metrics records."""
    config = load_config(EXAMPLES / example / "config.yaml", overrides=[f"run_dir={run_dir}"])
    assert (config.algorithm.name, config.model) == ("grpo", "tiny")
    with example_modules(example, *modules):
        Trainer(config).fit()
    return read_metrics(run_dir / "metrics.jsonl")


def _rollouts_by_mode(run_dir: Path) -> dict[Mode, list[tuple[Any, list[str | None]]]]:
    """Each finished rollout's final reward and its calls' agent names, by mode."""

    async def read() -> dict[Mode, list[tuple[Any, list[str | None]]]]:
        out: dict[Mode, list[tuple[Any, list[str | None]]]] = {}
        async with open_store(f"sqlite:///{run_dir / 'store.db'}", watchdog_interval=None) as s:
            async for rollout in iter_rollouts(s, RolloutQuery(limit=1000)):
                assert rollout.status is RolloutStatus.SUCCEEDED, rollout.error
                records = await load_attempt(s, rollout.rollout_id)
                names = list(read_signals(records.calls, records.spans).agent_names)
                out.setdefault(rollout.mode, []).append((records.final_reward, names))
        return out

    return asyncio.run(read())


def _assert_trained(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every step ran its rollouts, scored each, built transitions and updated or said why not.

    Returns the step records.
    """
    steps = [r for r in records if r.get("time/step_s") is not None]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    for record in steps:
        assert record["rollouts/finished"] == TASKS_PER_STEP * GROUP
        assert record["rollouts/failed"] == 0
        assert record["transitions/rollouts"] == TASKS_PER_STEP * GROUP
        assert record["transitions/rollouts_without_reward"] == 0  # every reward reached the store
        assert math.isfinite(record["reward/mean"])
        assert record["transitions/calls"] > 0 and record["transitions"] > 0
        # A step that made no update may only be one where the groups had nothing to learn from:
        # a failure anywhere earlier (no calls, no transitions, all dropped) reads differently.
        if record["updated"] != 1.0:
            assert no_update_reason(record).startswith(EQUAL_GROUPS), no_update_reason(record)
    validations = [r for r in records if "val/reward_mean" in r]
    assert [r["step"] for r in validations] == [0, STEPS]  # before and after training
    for record in validations:
        assert record["val/failed"] == 0 and math.isfinite(record["val/reward_mean"])
    return steps


def _assert_rewarded(rollouts: dict[Mode, list[tuple[Any, list[str | None]]]]) -> None:
    """Each train and validation rollout recorded a reward in [0, 1] and made model calls."""
    assert len(rollouts[Mode.TRAIN]) == STEPS * TASKS_PER_STEP * GROUP
    assert len(rollouts[Mode.VAL]) == 2 * VAL_TASKS
    for reward, names in rollouts[Mode.TRAIN] + rollouts[Mode.VAL]:
        assert reward is not None and 0.0 <= reward <= 1.0
        assert names


@pytest.mark.slow
def test_sql_litagent_trains_its_writing_nodes(tmp_path: Path) -> None:
    records = _train("agl_sql", ("agl_sql_agent", "agl_sql_data"), tmp_path)
    steps = _assert_trained(records)
    rollouts = _rollouts_by_mode(tmp_path)
    _assert_rewarded(rollouts)
    # The graph's calls, by node: the checker runs after every write (0.x's graph), so both
    # kinds are there to select from.
    names = Counter(n for _, calls in rollouts[Mode.TRAIN] for n in calls)
    assert set(names) <= {"write_query", "rewrite_query", "check_query"}
    assert names["write_query"] == STEPS * TASKS_PER_STEP * GROUP and names["check_query"] > 0
    writing = sum(n for name, n in names.items() if fnmatch(str(name), "*write*"))
    # Exactly the writing nodes' calls became transitions; the checker's were skipped by name.
    calls_used = sum(r["transitions/calls_used"] for r in steps)
    empty = sum(r["transitions/skipped_empty"] for r in steps)
    assert calls_used + empty == writing and calls_used > 0
    assert sum(r["transitions/skipped_agent"] for r in steps) == names["check_query"]
    assert sum(r["transitions/calls"] for r in steps) == sum(names.values())


@pytest.mark.slow
def test_calc_autogen_agent_trains(tmp_path: Path) -> None:
    records = _train("agl_calc", ("agl_calc_agent", "agl_calc_data"), tmp_path)
    steps = _assert_trained(records)
    rollouts = _rollouts_by_mode(tmp_path)
    _assert_rewarded(rollouts)
    # No agent selection: every call the assistant made is trained (or empty, so skipped).
    used = sum(r["transitions/calls_used"] + r["transitions/skipped_empty"] for r in steps)
    assert used == sum(r["transitions/calls"] for r in steps)
    assert sum(r["transitions/skipped_agent"] for r in steps) == 0


def test_sql_tasks_hold_out_values_never_trained_on() -> None:
    with example_modules("agl_sql", "agl_sql_data") as (data,):
        train, heldout = data.train_tasks(), data.heldout_tasks()
        assert len(heldout) == data.HELDOUT_SIZE >= 64
        assert data.heldout_tasks() == heldout  # the same order every time
        assert {t["template"] for t in heldout[:64]} == set(data.TEMPLATES)
        # A task's id is its template and value: no held-out value is in a training question.
        values = {t["id"].split(":", 1)[1] for t in train}
        assert not values & {t["id"].split(":", 1)[1] for t in heldout}
        assert len({t["id"] for t in train + heldout}) == len(train) + len(heldout)
        db = data.shop_db()
        for task in train + heldout:  # every gold query answers something
            assert db.execute(task["gold"]).fetchall() not in ([], [(None,)], [(0,)])
        with pytest.raises(Exception, match="readonly"):
            db.execute("DROP TABLE products")


def test_calc_tasks_hold_out_problems_never_trained_on() -> None:
    with example_modules("agl_calc", "agl_calc_data") as (data,):
        train, heldout = data.train_tasks(), data.heldout_tasks()
        assert len(heldout) == data.HELDOUT_POOL >= 64 and len(train) == 512
        assert not {t["question"] for t in train} & {t["question"] for t in heldout}
        assert Counter(t["template"] for t in heldout[:64]) == {t.name: 8 for t in data.TEMPLATES}
        for task in train + heldout:
            assert data.evaluate(task["expression"]) == task["result"] > 0
        assert data.score("so ### ANSWER: 1,024 ### and 7", 1024) == 1.0
        assert data.score("There are 41 left.", 41) == 1.0
        assert data.score("### ANSWER: 40 ###", 41) == 0.0


@pytest.mark.parametrize(("example", "shipped"), [("agl_sql", "sql"), ("agl_calc", "math")])
def test_gemma_configs_train_like_the_shipped_framework_examples(
    example: str, shipped: str
) -> None:
    """``gemma.yaml`` is measured like ``examples/sql`` / ``examples/math``: the same settings."""
    config = load_config(EXAMPLES / example / "gemma.yaml")
    reference = load_config(EXAMPLES / shipped / "config.yaml")
    assert config.model == reference.model == "gemma-3-270m"
    assert config.data.val is not None and config.data.val.endswith(":heldout_tasks")
    assert config.engine.max_batch == reference.engine.max_batch
    for key in ("concurrency", "train_sampling", "val_sampling"):
        assert getattr(config.rollouts, key) == getattr(reference.rollouts, key), key
    ours, theirs = config.algorithm, reference.algorithm
    assert (ours.steps, ours.tasks_per_step, ours.group_size, ours.grpo) == (
        theirs.steps,
        theirs.tasks_per_step,
        theirs.group_size,
        theirs.grpo,
    )
    assert config.validation is not None and reference.validation is not None
    assert config.validation.every == reference.validation.every
