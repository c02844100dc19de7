"""``fulmen train`` with ``algorithm: demos`` end to end on the real built-in engine (``tiny``).

The tiny model writes noise, so the reward does not read its text: a training task is solved
when the task says so (collection finds exactly those), and a scoring rollout is solved when
its prompt shows two demonstrations. What is checked is the plumbing with a real engine: the
published prompt's demonstrations are the tiny model's own recorded turns of solved training
tasks, and the run's metrics carry the search and the validation before and after.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from fulmen.algorithms.demos.state import SearchState
from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.types import PromptTemplate

AGENT = '''
from typing import Any

from openai import AsyncOpenAI

import fulmen
from fulmen.types import PromptTemplate

ECHO = PromptTemplate(instructions="Repeat the word twice.", template="Word: {word}")


@fulmen.rollout
async def echo(task: dict[str, Any], llm: fulmen.LLM, prompt: PromptTemplate = ECHO) -> float:
    """Two chained calls; solved when the task says so or the prompt shows two examples."""
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        messages: list[Any] = prompt.messages(word=task["word"])
        first = await client.chat.completions.create(
            model=llm.model, messages=messages, max_tokens=3
        )
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content or ""},
            {"role": "user", "content": "Again."},
        ]
        await client.chat.completions.create(model=llm.model, messages=messages, max_tokens=3)
    return 1.0 if task.get("solvable") or len(prompt.demos) >= 2 else 0.0
'''


def write_project(tmp_path: Path) -> Path:
    (tmp_path / "echo_agent.py").write_text(AGENT)
    words = ["red", "green", "blue", "cyan", "pink", "gold", "gray", "teal", "navy", "lime"]
    train = [{"id": f"w{i}", "word": w, "solvable": i % 2 == 0} for i, w in enumerate(words)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(t) + "\n" for t in train))
    (tmp_path / "val.jsonl").write_text('{"id": "v0", "word": "plum"}\n')
    config = tmp_path / "demos.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            model: tiny
            agent: echo_agent:echo
            python_path: ["."]
            run_dir: run
            data: {train: train.jsonl, val: val.jsonl}
            rollouts:
              concurrency: 4
              timeout_s: 60
              train_sampling: {temperature: 1.0, max_tokens: 3}
              val_sampling: {temperature: 0.0, max_tokens: 3}
            validation: {every: 1}
            algorithm:
              name: demos
              initial: echo_agent:ECHO
              demos: 2
              candidates: 3
              val_tasks: 2
              pool: 3
            """
        )
    )
    return config


@pytest.mark.slow
def test_fulmen_train_publishes_demonstrations_recorded_from_the_engine(tmp_path: Path) -> None:
    config = write_project(tmp_path)
    assert main(["train", str(config)]) == 0
    run = tmp_path / "run"
    state = SearchState.load(run)
    assert state is not None and len(state.pool) == 3 and len(state.candidates) == 3
    # The unchanged prompt solves only the search tasks marked solvable; the two candidates
    # tie at 1.0 and the earlier one wins.
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    parent = sum(train[i]["solvable"] for i in state.search_tasks) / len(state.search_tasks)
    scores = [c.score for c in state.candidates]
    assert scores == [parent, 1.0, 1.0] and parent < 1.0
    asyncio.run(check_published_demos(run))
    assert state.best().index == 1
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["val/success"] for r in rows if "val/success" in r] == [0.0, 1.0]
    assert [r["demos/score"] for r in rows if "demos/score" in r] == scores


async def check_published_demos(run: Path) -> None:
    """The final prompt's demonstrations are recorded turns of solved training rollouts."""
    store = await open_store(f"sqlite:///{run / 'store.db'}")
    try:
        latest = await store.latest_resources()
        assert latest is not None
        final = latest.resources["prompt"]
        assert isinstance(final, PromptTemplate) and final.lineage is not None
        assert final.lineage.optimizer == "demos" and final.lineage.step == 1
        assert len(final.demos) == 2
        for demo in final.demos:
            rollout = await store.get_rollout(str(demo.metadata["rollout_id"]))
            assert rollout.input["solvable"] is True  # type: ignore[index]
            assert demo.inputs == {"word": rollout.input["word"]}  # type: ignore[index]
            calls = sorted(
                (await store.query_llm_calls(rollout.rollout_id)).items, key=lambda c: c.sequence
            )
            assert all(c.is_token_level for c in calls)  # the engine's own record
            recorded = [calls[0].choices[0].text, "Again.", calls[1].choices[0].text]
            assert [m.content for m in demo.messages] == recorded
    finally:
        await store.aclose()
