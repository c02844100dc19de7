"""`fulmen train` with `algorithm.dynamic_sampling`, end to end on the tiny model.

Most tasks give every rollout the same reward (a "flat" group: nothing to learn); the others
reward the sampled text, so their groups usually differ. With extra samples, redraws and the
difficulty filter on, every rollout a step ran is in the store and counted in its
``sampling/*`` metrics, the step trains only groups with signal, and a task whose group was
flat is not drawn again within ``skip_flat_for`` steps.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from tests.trainer.test_roles_run import _train

AGENT = """
from typing import Any

import fulmen
from openai import OpenAI


def tasks() -> list[dict[str, Any]]:
    kinds = ["flat"] * 8 + ["mixed"] * 4
    return [{"id": f"{kind}{i}", "kind": kind} for i, kind in enumerate(kinds)]


@fulmen.rollout
def agent(task: dict[str, Any], llm: fulmen.LLM) -> float:
    with OpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        out = client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": "Say something."}]
        )
    text = out.choices[0].message.content or ""
    return 1.0 if task["kind"] == "flat" else float(sum(map(ord, text)) % 2)
"""

CONFIG = """\
model: tiny
agent: my_agent:agent
python_path: ['.']
run_dir: run
data: {train: "my_agent:tasks"}
rollouts:
  concurrency: 4
  timeout_s: 60
  train_sampling: {temperature: 1.0, max_tokens: 6}
algorithm:
  steps: 2
  tasks_per_step: 2
  group_size: 2
  grpo: {learning_rate: 0.01}
  dynamic_sampling: {extra_samples: 1, redraw: true, max_redraws: 3, skip_flat_for: 5}
"""


async def _rollouts_by_step(db: Path) -> dict[str, list[tuple[str, str | None]]]:
    """(rollout id, task id) of every training rollout, by step (``s0``, ``s1``)."""
    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts
    from fulmen.types import Mode, RolloutQuery

    out: dict[str, list[tuple[str, str | None]]] = {}
    async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
        async for rollout in iter_rollouts(store, RolloutQuery(mode=Mode.TRAIN, limit=1000)):
            tag = rollout.rollout_id.split("-")[-3]  # s0, s0x0, s0d1, ...
            step = "s" + tag[1:].split("x")[0].split("d")[0]
            out.setdefault(step, []).append((rollout.rollout_id, rollout.task_id))
    return out


@pytest.mark.slow
def test_steps_train_groups_with_signal_and_count_every_rollout_they_ran(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "my_agent.py").write_text(AGENT)
    (tmp_path / "config.yaml").write_text(textwrap.dedent(CONFIG))
    done = _train(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    steps = [m for m in map(json.loads, lines) if "sampling/rollouts" in m]
    assert [m["step"] for m in steps] == [1, 2]
    by_step = asyncio.run(_rollouts_by_step(tmp_path / "run" / "store.db"))
    flat_at_first: set[str | None] = set()
    for m, name in zip(steps, ["s0", "s1"], strict=True):
        ran = by_step[name]
        # every rollout the step ran is stored and counted: its groups, their extra samples
        assert (
            m["sampling/rollouts"]
            == len(ran)
            == 2 * m["sampling/groups"] + m["sampling/extra_rollouts"]
        )
        # a group still flat at the end was flat at first, and got its extra sample
        assert m["sampling/extra_rollouts"] >= m["sampling/flat_groups"]
        assert m["sampling/trained_groups"] == m["sampling/signal_groups"] <= 2
        assert m["sampling/redrawn_groups"] > 0 or m["sampling/trained_groups"] == 2
        if name == "s0":
            flat_at_first = {t for _, t in ran if t and t.startswith("flat")}
    # 8 of 12 tasks always give 1.0: the first step met some, and redrew in their place
    assert flat_at_first and steps[0]["sampling/flat_groups"] >= 1
    assert steps[0]["sampling/draws"] >= 1
    # the difficulty filter kept them out of the next step
    assert not flat_at_first & {t for _, t in by_step["s1"]}


@pytest.mark.slow
def test_a_run_too_short_for_the_difficulty_filter_is_warned(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "my_agent.py").write_text(AGENT)
    (tmp_path / "config.yaml").write_text(textwrap.dedent(CONFIG))
    # 12 tasks, 2 a step, no redraws: no task comes twice before step 7, the run ends at 1
    done = _train(
        tmp_path,
        "algorithm.steps=1",
        "algorithm.dynamic_sampling={extra_samples: 1, redraw: false, skip_flat_for: 5}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "skip_flat_for cannot act in this run of 1 steps: no task is drawn twice before step 7 "
        "(12 training tasks, 2 a step)"
    ) in done.stderr
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    step = next(m for m in map(json.loads, lines) if "sampling/rollouts" in m)
    assert step["sampling/skipped_tasks"] == 0 and step["sampling/draws"] == 0
