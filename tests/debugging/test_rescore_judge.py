"""``fulmen rescore --judge``: a rubric re-scores stored rollouts of a real SQLite store.

The judge is a scripted upstream on 127.0.0.1 (in a thread: the command runs its own event
loop). Four finished rollouts of two tasks, each with a reward of 1.0 its agent posted; the
rubric has a ``question`` (scored per rollout) and a ``rank`` (one call per task's group).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.transitions.trajectory import load_attempt
from fulmen.types import AttemptStatus, LLMCallCreate, RewardCreate, RolloutCreate
from tests.gateway.scripted_upstream import serve_app
from tests.rewards.status_judge import Answer, StatusJudge, create_status_app

ANSWERS = {"r0": "hello there", "r1": "hi", "r2": "good day", "r3": "go away"}
TASKS = {"r0": "t0", "r1": "t0", "r2": "t1", "r3": "t1"}
GOAL = {"hello there": 10, "hi": 6, "good day": 8}  # "go away": the judge answers 400


def reply(body: dict[str, Any]) -> Answer:
    user = body["messages"][-1]["content"]
    if "=== R1 ===" in user:  # a ranking of a group of two: the second is better
        return Answer(content='{"ranking": ["R2", "R1"]}')
    for text, goal in GOAL.items():
        if text in user:
            return Answer(content=json.dumps({"scores": {"goal": goal}}))
    return Answer(400)


@pytest.fixture
def judge() -> Iterator[tuple[StatusJudge, str]]:
    """The scripted judge, served on 127.0.0.1 from a thread of its own."""
    script = StatusJudge(reply_for=reply)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    url: list[str] = []
    stop: list[asyncio.Event] = []

    async def serve() -> None:
        stop.append(asyncio.Event())
        async with serve_app(create_status_app(script)) as served:
            url.append(served)
            started.set()
            await stop[0].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    try:
        assert started.wait(10)
        yield script, f"{url[0]}/v1"
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(10)
        loop.close()


async def _fill(url: str) -> None:
    async with open_store(url, watchdog_interval=None) as store:
        creates = [
            RolloutCreate(input={"prompt": "greet"}, task_id=TASKS[rid], rollout_id=rid)
            for rid in ANSWERS
        ]
        await store.enqueue(creates)
        for claim in await store.claim("w", limit=len(creates)):
            rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
            call = LLMCallCreate(
                call_id=f"c-{rid}",
                rollout_id=rid,
                attempt_id=aid,
                request={"messages": [{"role": "user", "content": "greet"}]},
                response={"choices": [{"message": {"content": ANSWERS[rid]}}]},
                started_at=0.0,
            )
            await store.add_llm_calls([call])
            await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
            await store.add_reward(RewardCreate.scalar(1.0, rollout_id=rid))


@pytest.fixture
def stored(tmp_path: Path, judge: tuple[StatusJudge, str]) -> tuple[str, Path]:
    """The store's URL and a judge config (a training config's reward: section)."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    asyncio.run(_fill(url))
    config = tmp_path / "train.yaml"
    config.write_text(
        "agent: my_agent:run  # the rest of a training config is not read\n"
        "reward:\n"
        f"  judge: {{base_url: '{judge[1]}', model: judge-model,\n"
        "          retry: {attempts: 2, initial_delay_s: 0.001, max_delay_s: 0.002}}\n"
        "  criteria:\n"
        "    - {name: goal, weight: 1, question: 'Is it a polite greeting?'}\n"
        "    - {name: best, weight: 1, rank: 'Which greeting is warmest?'}\n",
        encoding="utf-8",
    )
    return url, config


def rescore(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["rescore", "--store", url, "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


async def _read(url: str) -> dict[str, tuple[float | None, list[dict[str, float]]]]:
    async with open_store(url, watchdog_interval=None) as store:
        out = {}
        for rid in ANSWERS:
            records = await load_attempt(store, rid)
            rewards = [r.values for r in await store.list_rewards(rid)]
            out[rid] = (records.final_reward, rewards)
        return out


def judge_records(url: str) -> list[str]:
    """The agent names of the call records that belong to no rollout (the judge's)."""
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
        rows = db.execute("SELECT body FROM fulmen_llm_calls WHERE rollout_id IS NULL")
        return [json.loads(body)["agent_name"] for (body,) in rows.fetchall()]


def test_a_dry_run_reports_old_and_new_rewards_and_posts_nothing(
    stored: tuple[str, Path], judge: tuple[StatusJudge, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, config = stored
    summary = rescore(capsys, url, "--judge", str(config), "--dry-run")
    items = {i["rollout_id"]: i for i in summary["items"]}
    # goal / 10, and the better of each pair ranks 1.0: mean of the two, weights 1 and 1.
    assert items["r0"]["scores"] == {"goal": 1.0, "best": 0.0}
    assert items["r1"]["scores"] == {"goal": 0.6, "best": 1.0}
    assert items["r2"]["scores"] == {"goal": 0.8, "best": 0.0}
    expected = {"r0": 0.5, "r1": 0.8, "r2": 0.4}
    assert {r: items[r]["new"] for r in expected} == pytest.approx(expected)
    assert all(items[r]["old"] == 1.0 for r in ANSWERS)
    # The judge refused r3's rubric call (a 400: not retried): listed, no score.
    [error] = summary["errors"]
    assert error["rollout_id"] == "r3" and "'status': 400" in error["error"]
    assert items["r3"]["new"] is None
    assert (summary["scored"], summary["failed"]) == (3, 1)
    assert summary["judge"]["requests"] == 6  # 4 rubric calls, 2 rankings
    assert summary["judge"]["is_dry_run"] and summary["judge"]["posted"] is None
    assert judge[0].calls == 6
    after = asyncio.run(_read(url))
    assert all(final == 1.0 and len(rewards) == 1 for final, rewards in after.values())
    assert judge_records(url) == []  # nor the judge's call records
    # The text report shows each rollout's old and new reward and the judge's failure.
    capsys.readouterr()
    assert main(["rescore", "--store", url, "--judge", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "judged 3 of 4 rollouts (1 the judge could not score)" in out
    assert "dry run: nothing posted" in out
    assert "r1" in out and "1.0000 -> 0.8000" in out and "goal=0.60 best=1.00" in out
    assert "error on r3:" in out


def test_posting_stores_the_rubric_rewards_and_the_cache_saves_the_second_run(
    stored: tuple[str, Path], judge: tuple[StatusJudge, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, config = stored
    cache = config.parent / "judge-cache.jsonl"
    first = rescore(capsys, url, "--judge", str(config), "--cache", str(cache))
    assert first["judge"]["posted"] == 3 and first["judge"]["cache_hits"] == 0
    after = asyncio.run(_read(url))
    assert after["r1"][0] == pytest.approx(0.8)  # the rubric's mean is the reward now
    assert after["r1"][1][-1] == {"goal": 0.6, "best": 1.0, "reward": pytest.approx(0.8)}
    assert after["r3"][0] == 1.0 and len(after["r3"][1]) == 1  # unscored: keeps its reward
    assert judge_records(url) == ["judge"] * 6  # each call recorded, the refused one too
    # Again, with the answers on disk: only the refused question reaches the judge, and the
    # same rewards are stored once.
    calls = judge[0].calls
    second = rescore(capsys, url, "--judge", str(config), "--cache", str(cache))
    assert second["judge"]["cache_hits"] == 5 and second["judge"]["requests"] == 1
    assert judge[0].calls == calls + 1
    assert [len(r) for _, r in asyncio.run(_read(url)).values()] == [
        len(r) for _, r in after.values()
    ]


def test_a_reward_only_file_works_and_contradictions_are_refused(
    stored: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, config = stored
    alone = config.parent / "rubric.yaml"
    text = config.read_text(encoding="utf-8").split("\n", 1)[1]  # only the reward: section
    alone.write_text(text, encoding="utf-8")
    summary = rescore(capsys, url, "--judge", str(alone), "--dry-run", "--task", "t0")
    assert summary["rollouts"] == 2 and summary["scored"] == 2
    capsys.readouterr()
    assert main(["rescore", "--store", url, "--judge", str(alone), "--write", "x"]) == 1
    assert "--write and --primary apply to --reward" in capsys.readouterr().err
    empty = config.parent / "empty.yaml"
    empty.write_text("agent: a:b\n", encoding="utf-8")
    assert main(["rescore", "--store", url, "--judge", str(empty)]) == 1
    assert "has no reward: section" in capsys.readouterr().err
