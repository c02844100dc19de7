"""``algorithm: apo`` on the calc agent, with a scripted model playing agent, critic and editor.

The scripted upstream (the edge of the world: a real HTTP server) answers the calc agent
according to a rule written in the prompt's instructions: ``Rule: SMALL`` solves only the
scoring task with the smallest answer, ``Rule: MOST`` every scoring task but that one, and the
shipped prompt none; no prompt solves a minibatch task, so every round has failures to
critique, and the held-out validation tasks are never solved (the search never sees them).
As critic it returns a fixed critique; as editor, the next scripted rewrite. Everything else
is real: ``Trainer``, SQLite store, gateway, runner, the calc agent, an ``endpoint`` engine.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulmen.algorithms.apo.state import APOState
from fulmen.algorithms.apo.tasks import split_tasks
from fulmen.prompts import load_prompt_versions
from fulmen.store import open_store
from fulmen.trainer.config import load_config
from fulmen.trainer.trainer import Trainer
from fulmen.types import PromptTemplate
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

CALC = Path(__file__).resolve().parents[3] / "examples" / "calc"
CRITIQUE = "1. The prompt states no rule, so the model guesses."
SMALL = "Solve the word problem with CALC(expression), then ANSWER: number. Rule: SMALL"
MOST = "Solve the word problem with CALC(expression), then ANSWER: number. Rule: MOST"
SEED = 1
SCORE_TASKS = 4


@pytest.fixture
def calc_tasks() -> Iterator[Any]:
    """The calc example's task generator (its directory on ``sys.path`` only for the test)."""
    sys.path.insert(0, str(CALC))
    try:
        import tasks

        yield tasks
    finally:
        sys.path.remove(str(CALC))
        for name in ("agent", "tasks"):
            sys.modules.pop(name, None)


class Model:
    """Agent, critic and editor in one scripted model; keeps what the optimizer asked it."""

    def __init__(
        self, tasks: list[dict[str, Any]], scored: set[str], smallest: str, edits: list[str]
    ) -> None:
        self.expression = {t["question"]: t["expression"] for t in tasks}
        self.scored = scored
        self.smallest = smallest
        self.edits = edits
        self.critiques: list[str] = []
        self.edit_requests: list[str] = []
        self.critic_called = asyncio.Event()

    def reply(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        first, last = str(messages[0]["content"]), str(messages[-1]["content"])
        if first.startswith("You review the prompt"):
            self.critiques.append(last)
            self.critic_called.set()
            return Reply(content=CRITIQUE)
        if first.startswith("You rewrite the prompt"):
            self.edit_requests.append(last)
            edit = self.edits[(len(self.edit_requests) - 1) % len(self.edits)]
            return Reply(content=f"Here it is:\n<prompt>\n{edit}\n</prompt>")
        if last.startswith("RESULT: "):
            return Reply(content="ANSWER: " + last.removeprefix("RESULT: "))
        question = last.rsplit("Question: ", 1)[-1]
        knows = ("Rule: SMALL" in first and question == self.smallest) or (
            "Rule: MOST" in first and question in self.scored and question != self.smallest
        )
        return Reply(content=f"CALC({self.expression[question] if knows else '0 + 1'})")


def write_config(tmp_path: Path, url: str, tasks: Any, **algorithm: Any) -> Path:
    train, held_out = tasks.make_tasks("train", 6), tasks.make_tasks("test", 4)
    for name, rows in (("train.jsonl", train), ("val.jsonl", held_out)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = {"initial": "agent:CALC_PROMPT", "rounds": 1, "beam_width": 1, "branch": 2,
                "minibatch": 2, "score_tasks": SCORE_TASKS, **algorithm}  # fmt: skip
    config = tmp_path / "apo.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            model: scripted
            agent: agent:calc_agent
            python_path: [{CALC}]
            run_dir: run
            seed: {SEED}
            data: {{train: train.jsonl, val: val.jsonl}}
            engine: {{kind: endpoint, url: "{url}/v1"}}
            rollouts: {{concurrency: 4, timeout_s: 30}}
            validation: {{every: 1}}
            algorithm: {json.dumps({"name": "apo", **settings})}
            """
        )
    )
    return config


def model_for(tasks: Any, edits: list[str]) -> Model:
    train, held_out = tasks.make_tasks("train", 6), tasks.make_tasks("test", 4)
    scoring, _ = split_tasks(len(train), score=SCORE_TASKS, seed=SEED)
    scored = [train[i] for i in scoring]
    smallest = min(scored, key=lambda t: (t["answer"], t["question"]))["question"]
    return Model(train + held_out, {t["question"] for t in scored}, smallest, edits)


def optimizer_calls(db: Path) -> dict[str, int]:
    """Calls recorded with no rollout, by agent name (read from the SQLite file itself)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT json_extract(body, '$.agent_name'), count(*) FROM fulmen_llm_calls "
            "WHERE rollout_id IS NULL GROUP BY 1"
        ).fetchall()
    return {str(name): int(n) for name, n in rows}


@pytest.mark.parametrize(("selection", "kept"), [("beam", [MOST]), ("pareto", [MOST, SMALL])])
async def test_selection_keeps_the_better_candidate_and_pareto_the_instance_best(
    tmp_path: Path, calc_tasks: Any, selection: str, kept: list[str]
) -> None:
    model = model_for(calc_tasks, [SMALL, MOST])
    async with serve_app(create_upstream_app(Script(reply_for=model.reply))) as url:
        config = load_config(write_config(tmp_path, url, calc_tasks, selection=selection))
        await Trainer(config).afit()

    state = APOState.load(tmp_path / "run")
    assert state is not None and state.rounds_done == 1
    assert [c.prompt.instructions for c in state.beam] == kept
    scores = {c.prompt.instructions: c.score for c in state.beam}
    assert scores[MOST] == 0.75 and scores.get(SMALL, 0.25) == 0.25
    # The critic saw the failing runs: the prompt, the agent's calls and replies, the reward.
    (critique_request,) = model.critiques
    assert "Solve the word problem. First write CALC" in critique_request
    assert "call 1 reply: CALC(0 + 1)" in critique_request and "reward: 0" in critique_request
    assert all(CRITIQUE in r for r in model.edit_requests) and len(model.edit_requests) == 2

    db = tmp_path / "run" / "store.db"
    assert optimizer_calls(db) == {"apo-critic": 1, "apo-editor": 2}
    store = await open_store(f"sqlite:///{db}")
    try:
        versions = {v.prompt.instructions: v for v in await load_prompt_versions(store)}
        latest = await store.latest_resources()
    finally:
        await store.aclose()
    start, small, most = (versions[k] for k in (next(iter(versions)), SMALL, MOST))
    # Lineage and scores of every candidate are stored and read back.
    assert (start.score, small.score, most.score) == (0.0, 0.25, 0.75)
    for child in (small, most):
        lineage = child.prompt.lineage
        assert lineage is not None and lineage.parent == start.version
        assert (lineage.optimizer, lineage.step, lineage.critique) == ("apo", 1, CRITIQUE)
        assert lineage.edit is not None and f"+{child.prompt.instructions}" in lineage.edit
    assert sorted(small.scores[-1].instances.values()) == [0.0, 0.0, 0.0, 1.0]
    assert sorted(most.scores[-1].instances.values()) == [0.0, 1.0, 1.0, 1.0]
    # The best prompt is what later rollouts and stages get.
    assert latest is not None
    final = latest.resources["prompt"]
    assert isinstance(final, PromptTemplate) and final.instructions == MOST
    # The held-out tasks were validated before and after, and never used by the search.
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["val/success"] for r in rows if "val/success" in r] == [0.0, 0.0]
    assert [r["apo/best_score"] for r in rows if "apo/best_score" in r] == [0.75]


async def test_a_cancelled_run_resumes_without_repeating_finished_rounds(
    tmp_path: Path, calc_tasks: Any
) -> None:
    model = model_for(calc_tasks, [SMALL, MOST, MOST + " Be brief.", SMALL + " Be brief."])
    async with serve_app(create_upstream_app(Script(reply_for=model.reply))) as url:
        config = load_config(write_config(tmp_path, url, calc_tasks, rounds=2))
        run = asyncio.create_task(Trainer(config).afit())
        # Round 2 starts with its critique: cancel the run while the critic is answering.
        while len(model.critiques) < 2:
            model.critic_called.clear()
            called = asyncio.ensure_future(model.critic_called.wait())
            done, _ = await asyncio.wait(
                {called, run}, timeout=60, return_when=asyncio.FIRST_COMPLETED
            )
            called.cancel()
            if run in done:  # a run that failed early says why, instead of a timeout here
                run.result()
                pytest.fail("the run ended before its second round's critique")
            assert done, "no critique within 60 s"
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        first = APOState.load(tmp_path / "run")
        assert first is not None and first.rounds_done == 1
        round_one = [c.version for c in first.beam]
        edits_before = len(model.edit_requests)
        assert edits_before == 2

        await Trainer(load_config(write_config(tmp_path, url, calc_tasks, rounds=2))).afit()

    second = APOState.load(tmp_path / "run")
    assert second is not None and second.rounds_done == 2
    # Round 1 was not run again: one more critique (round 2's) and its two edits.
    assert len(model.critiques) == 3 and len(model.edit_requests) == edits_before + 2
    assert all("Rule: MOST" in c for c in model.critiques[1:])  # round 2 critiques the beam
    store = await open_store(f"sqlite:///{tmp_path / 'run' / 'store.db'}")
    try:
        versions = await load_prompt_versions(store)
    finally:
        await store.aclose()
    by_version = {v.version: v for v in versions}
    assert by_version[round_one[0]].prompt.instructions == MOST
    steps = sorted(
        (v.prompt.lineage.step, v.prompt.instructions)
        for v in versions
        if v.prompt.lineage is not None and v.prompt.lineage.optimizer == "apo"
    )
    assert [s for s, _ in steps] == [1, 1, 2, 2]


async def test_the_rollout_budget_stops_before_the_next_round(
    tmp_path: Path, calc_tasks: Any
) -> None:
    model = model_for(calc_tasks, [SMALL, MOST])
    async with serve_app(create_upstream_app(Script(reply_for=model.reply))) as url:
        # start: 4 scoring rollouts; round 1: 2 minibatch + 2 candidates x 4 scoring = 14
        config = write_config(tmp_path, url, calc_tasks, rounds=3, max_rollouts=14)
        await Trainer(load_config(config)).afit()
    state = APOState.load(tmp_path / "run")
    assert state is not None and (state.rounds_done, state.rollouts) == (1, 14)
    assert len(model.critiques) == 1


async def test_a_run_whose_every_rollout_failed_stops_instead_of_publishing(
    tmp_path: Path, calc_tasks: Any
) -> None:
    from fulmen.errors import AgentFailed

    # No model behind the endpoint: every rollout of the first scoring fails.
    config = write_config(tmp_path, "http://127.0.0.1:9", calc_tasks, rounds=1)
    with pytest.raises(AgentFailed, match=r"every one of the 4 rollouts scoring prompt version"):
        await Trainer(load_config(config)).afit()
    state = APOState.load(tmp_path / "run")
    assert state is None or state.rounds_done == 0
