"""``algorithm: demos`` on the calc agent against a scripted model that needs one demonstration.

The scripted upstream (the edge of the world: a real HTTP server) plays a model that solves a
calc question only in two cases: with the shipped hand-written prompt, the questions of the
"teachable" training tasks (so collection finds successful rollouts, and one teachable task
fails on purpose); with a bootstrapped prompt, any question, but only when the prompt shows the
demonstration of one particular training task (``magic``). With one demonstration per
candidate and a pool of seven, exactly one candidate shows it: the search must pick that one,
publish it with lineage and scores, and take its demonstration from the recorded calls.
Everything else is real: ``Trainer``, SQLite store, gateway, runner, the calc agent.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulmen.algorithms.demos.search import split_tasks
from fulmen.algorithms.demos.state import SearchState
from fulmen.store import open_store
from fulmen.trainer.config import load_config
from fulmen.trainer.trainer import Trainer
from fulmen.types import PROMPT_SCORES_KEY, PromptTemplate
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

CALC = Path(__file__).resolve().parents[3] / "examples" / "calc"
SEED = 3
SEARCH_TASKS = 4


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
    """The scripted model's rules (see the module docstring); counts what it was asked."""

    def __init__(self, tasks: list[dict[str, Any]], teachable: set[str], magic: str) -> None:
        self.expression = {t["question"]: t["expression"] for t in tasks}
        self.teachable = teachable
        self.magic = magic
        self.asked: list[str] = []

    def reply(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = str(messages[-1]["content"])
        if last.startswith("RESULT: "):
            return Reply(content="ANSWER: " + last.removeprefix("RESULT: "))
        question = last.rsplit("Question: ", 1)[-1]
        self.asked.append(question)
        shown = [str(m["content"]).rsplit("Question: ", 1)[-1] for m in messages[:-1]]
        hand_written = any("Ann has 12 stickers" in s for s in shown)
        knows = question in self.teachable if hand_written else self.magic in shown
        expression = self.expression.get(question, "0 + 1") if knows else "0 + 1"
        return Reply(content=f"CALC({expression})")


def write_config(
    tmp_path: Path,
    train: list[dict[str, Any]],
    held_out: list[dict[str, Any]],
    url: str,
    candidates: int,
) -> Path:
    for name, rows in (("train.jsonl", train), ("val.jsonl", held_out)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "demos.yaml"
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
            algorithm:
              name: demos
              initial: agent:CALC_PROMPT
              demos: 1
              candidates: {candidates}
              val_tasks: {SEARCH_TASKS}
              pool: 7
            """
        )
    )
    return config


async def test_the_search_publishes_the_candidate_with_the_best_score(
    tmp_path: Path, calc_tasks: Any
) -> None:
    train = calc_tasks.make_tasks("train", 12)
    held_out = calc_tasks.make_tasks("test", 3)
    _, sources = split_tasks(len(train), search=SEARCH_TASKS, seed=SEED)
    failing = train[sources[0]]["question"]  # teachable in name only: its rollout fails
    teachable = {train[i]["question"] for i in sources[1:]}
    magic_task = train[sources[4]]
    model = Model(train + held_out, teachable, magic_task["question"])
    async with serve_app(create_upstream_app(Script(reply_for=model.reply))) as url:
        config = load_config(write_config(tmp_path, train, held_out, url, candidates=8))
        await Trainer(config).afit()

    state = SearchState.load(tmp_path / "run")
    assert state is not None
    # The pool: one demonstration per solved source task; the failed one is not there.
    pool_questions = {d.inputs["question"] for d in state.pool}
    assert pool_questions == teachable and failing not in pool_questions
    # Seven single-demonstration candidates cover the pool once; only the magic one scores.
    assert len(state.candidates) == 8
    scores = {c.index: c.score for c in state.candidates}
    (winner,) = [c for c in state.candidates if c.score == max(scores.values())]
    assert [state.pool[i].inputs["question"] for i in winner.picks] == [magic_task["question"]]
    assert winner.score == 1.0 and sorted(scores.values())[:-1] == [0.0] * 7

    store = await open_store(f"sqlite:///{tmp_path / 'run' / 'store.db'}")
    try:
        latest = await store.latest_resources()
        assert latest is not None
        final = latest.resources["prompt"]
        assert isinstance(final, PromptTemplate) and final.lineage is not None
        assert final.lineage.optimizer == "demos" and final.lineage.parent == state.parent_version
        assert final.lineage.details["validation_score"] == 1.0
        assert final.lineage.details["candidate_version"] == winner.version
        # The demonstration is the magic rollout's own recorded exchange, not a rewrite.
        (demo,) = final.demos
        calls = (await store.query_llm_calls(str(demo.metadata["rollout_id"]))).items
        first, second = sorted(calls, key=lambda c: c.sequence)
        recorded = [
            first.choices[0].text,
            second.request["messages"][-1]["content"],  # type: ignore[index]
            second.choices[0].text,
        ]
        assert [m.content for m in demo.messages] == recorded
        assert recorded == [
            f"CALC({magic_task['expression']})",
            f"RESULT: {magic_task['answer']}",
            f"ANSWER: {magic_task['answer']}",
        ]
        # Every candidate is a stored prompt version, and every score is stored once.
        stored_scores: dict[int, float] = {}
        first_with_final: list[int] = []
        for version in range(1, latest.version + 1):
            snapshot = await store.get_resources(version)
            if snapshot.resources.get("prompt") == final:
                first_with_final.append(version)
            for entry in snapshot.metadata.get(PROMPT_SCORES_KEY) or []:  # type: ignore[union-attr]
                assert entry["version"] not in stored_scores  # type: ignore[index]
                stored_scores[entry["version"]] = entry["score"]  # type: ignore[index]
        # ... and the published winner carries its candidate's score.
        assert stored_scores == {c.version: c.score for c in state.candidates} | {
            first_with_final[0]: 1.0
        }
        for candidate in state.candidates[1:]:
            prompt = (await store.get_resources(candidate.version)).resources["prompt"]
            assert isinstance(prompt, PromptTemplate) and prompt.lineage is not None
            assert prompt.lineage.step == candidate.index
    finally:
        await store.aclose()
    # The run's own validation (held-out tasks) before and after: 0 with the shipped prompt.
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    val = [r["val/success"] for r in rows if "val/success" in r]
    assert val == [0.0, 1.0]


async def test_a_resumed_search_scores_only_the_candidates_it_had_not_scored(
    tmp_path: Path, calc_tasks: Any
) -> None:
    train = calc_tasks.make_tasks("train", 12)
    held_out = calc_tasks.make_tasks("test", 2)
    _, sources = split_tasks(len(train), search=SEARCH_TASKS, seed=SEED)
    teachable = {train[i]["question"] for i in sources}
    model = Model(train + held_out, teachable, train[sources[2]]["question"])
    async with serve_app(create_upstream_app(Script(reply_for=model.reply))) as url:
        await Trainer(load_config(write_config(tmp_path, train, held_out, url, 3))).afit()
        first = SearchState.load(tmp_path / "run")
        asked_first = len(model.asked)
        await Trainer(load_config(write_config(tmp_path, train, held_out, url, 6))).afit()
    second = SearchState.load(tmp_path / "run")
    assert first is not None and second is not None
    assert second.candidates[:3] == [
        c.model_copy(update={"is_recorded": True}) for c in first.candidates
    ]
    assert second.pool == first.pool and len(second.candidates) == 6
    # Three new candidates on the search tasks, plus the validation after: nothing collected
    # or scored again.
    assert len(model.asked) - asked_first == 3 * SEARCH_TASKS + len(held_out)


async def test_successful_rollouts_already_in_the_store_fill_the_pool_without_new_runs(
    tmp_path: Path, calc_tasks: Any
) -> None:
    train = calc_tasks.make_tasks("train", 12)
    held_out = calc_tasks.make_tasks("test", 2)
    _, sources = split_tasks(len(train), search=SEARCH_TASKS, seed=SEED)
    teachable = {train[i]["question"] for i in sources}
    model = Model(train + held_out, teachable, train[sources[2]]["question"])
    async with serve_app(create_upstream_app(Script(reply_for=model.reply))) as url:
        config = load_config(write_config(tmp_path, train, held_out, url, 2))
        await Trainer(config).afit()
        before = SearchState.load(tmp_path / "run")
        # A new search in the same store: the first one's bookkeeping is gone.
        SearchState.path_in(tmp_path / "run").unlink()
        asked_first = len(model.asked)
        await Trainer(config).afit()
    after = SearchState.load(tmp_path / "run")
    assert before is not None and after is not None
    assert before.collect_rollouts > 0 and after.collect_rollouts == 0
    assert len(after.pool) == len(before.pool)
    assert {d.metadata["rollout_id"] for d in after.pool} == {
        d.metadata["rollout_id"] for d in before.pool
    }
    # Two candidates and the validation after: no collection rollout ran.
    assert len(model.asked) - asked_first == 2 * SEARCH_TASKS + len(held_out)
