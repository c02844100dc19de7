"""``fulmen export`` against a real SQLite store holding two rewarded rollouts of one task."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.tracing import semconv
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    LLMChoice,
    Mode,
    RolloutCreate,
    Run,
    SpanCreate,
)


async def _fill(url: str, prefix: str = "r") -> None:
    async with open_store(url, watchdog_interval=None) as store:
        await store.enqueue(
            [
                RolloutCreate(input={"q": i}, task_id="t1", rollout_id=f"{prefix}{i}")
                for i in range(2)
            ]
        )
        for i, reward in enumerate((1.0, 0.0)):
            (claim,) = await store.claim("w")
            rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
            await store.add_llm_calls(
                [
                    LLMCallCreate(
                        call_id=f"{prefix}c{i}",
                        rollout_id=rid,
                        attempt_id=aid,
                        request={"messages": [{"role": "user", "content": "2+2?"}]},
                        response={
                            "choices": [{"message": {"role": "assistant", "content": f"ans{i}"}}]
                        },
                        prompt_token_ids=[1, 2, 3],
                        choices=[
                            LLMChoice(text=f"ans{i}", token_ids=[4, 5], logprobs=[-1.0, -2.0])
                        ],
                        is_token_level=True,
                        started_at=1.0,
                    )
                ]
            )
            await store.add_spans(
                [
                    SpanCreate(
                        rollout_id=rid,
                        attempt_id=aid,
                        trace_id="ab" * 16,
                        span_id=f"{prefix}s{i}",
                        name=semconv.SPAN_REWARD,
                        attributes={
                            semconv.REWARD_NAMES: ["reward"],
                            semconv.REWARD_VALUES: [reward],
                            semconv.REWARD_PRIMARY: "reward",
                        },
                        start_time=2.0,
                    )
                ]
            )
            await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    asyncio.run(_fill(url))
    return url


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_export_transitions(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl"
    assert main(["export", "transitions", "--store", store_url, "--out", str(out)]) == 0
    rows = _rows(out)
    assert [r["rollout_reward"] for r in rows] == [1.0, 0.0]
    assert rows[0]["prompt_token_ids"] == [1, 2, 3] and rows[0]["completion_token_ids"] == [4, 5]
    assert rows[0]["logprobs"] == [-1.0, -2.0]
    assert "wrote 2 transitions rows" in capsys.readouterr().out


def test_export_says_which_modes_it_read(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Validation rollouts are exported too unless --mode says otherwise: the summary says so."""

    async def add_val() -> None:
        async with open_store(store_url, watchdog_interval=None) as store:
            await store.enqueue([RolloutCreate(input={"q": 9}, mode=Mode.VAL)])

    asyncio.run(add_val())
    out = str(tmp_path / "t.jsonl")
    args = ["export", "transitions", "--store", store_url, "--out", out, "--all-statuses"]
    assert main(args) == 0
    assert "(rollouts read: 2 train, 1 val; --mode picks one)" in capsys.readouterr().out
    assert main([*args, "--mode", "train"]) == 0
    assert "(rollouts read: 2 train)" in capsys.readouterr().out


def test_export_sft_keeps_only_good_rollouts(store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    args = ["export", "sft", "--store", store_url, "--out", str(out), "--min-reward", "1"]
    assert main(args) == 0
    (row,) = _rows(out)
    assert row["rollout_id"] == "r0"
    assert row["messages"][-1]["content"] == "ans0"  # type: ignore[index]


def test_export_preferences_pairs_best_and_worst(store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "p.jsonl"
    assert main(["export", "preferences", "--store", store_url, "--out", str(out)]) == 0
    (row,) = _rows(out)
    assert row["chosen_rollout_id"] == "r0" and row["rejected_rollout_id"] == "r1"


def test_export_rejects_unknown_format(store_url: str, tmp_path: Path) -> None:
    assert main(["export", "sft", "--store", store_url, "--out", str(tmp_path / "x.csv")]) == 1


def test_export_refuses_per_call_credit_on_merged_rows(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a merged row carries one reward (its last call's): per-call rewards would be lost
    out = tmp_path / "t.jsonl"
    args = ["export", "transitions", "--store", store_url, "--out", str(out), "--merge"]
    assert main([*args, "--credit", "per_call"]) == 1
    assert "--credit per_call with --merge" in capsys.readouterr().err
    assert not out.exists()


def test_export_one_runs_rollouts(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--run`` keeps the rollouts ``fulmen train`` enqueued for that run (``RUN-g1-...``)."""

    async def add_run() -> None:
        async with open_store(store_url, watchdog_interval=None) as store:
            await store.start_run(Run(run_id="ra", name="ra", started_at=1.0))

    asyncio.run(add_run())
    asyncio.run(_fill(store_url, prefix="ra-g1-train1-t0-r"))
    out = tmp_path / "s.jsonl"
    args = ["export", "sft", "--store", store_url, "--out", str(out)]
    assert main([*args, "--run", "ra"]) == 0
    assert [r["rollout_id"] for r in _rows(out)] == ["ra-g1-train1-t0-r0", "ra-g1-train1-t0-r1"]
    assert "(rollouts read: 2 train)" in capsys.readouterr().out
    assert main(args) == 0
    assert len(_rows(out)) == 4  # without --run: every run's and the others
    assert main([*args, "--run", "nope"]) == 1
    assert "run 'nope' does not exist" in capsys.readouterr().err
