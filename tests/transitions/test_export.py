from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fulmen.errors import ConfigError
from fulmen.transitions import AttemptRecords, Transition
from fulmen.transitions.export import preference_rows, sft_rows, transition_rows, write_rows

from .factories import call, reward_span

QUESTION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]


def _attempt(rid: str, task: str | None, reward: float | None, answer: str) -> AttemptRecords:
    calls = [
        call(1, [1], [2], messages=QUESTION, reply="thinking", rollout_id=rid),
        call(
            3,
            [1, 2, 3],
            [4],
            messages=[*QUESTION, {"role": "assistant", "content": "thinking"}],
            reply=answer,
            rollout_id=rid,
        ),
    ]
    spans = [] if reward is None else [reward_span(5, reward, source="return", rollout_id=rid)]
    return AttemptRecords(rid, f"{rid}-a1", task, calls, spans)


def _transition() -> Transition:
    return Transition(
        rollout_id="r1",
        task_id="t",
        call_index=0,
        prompt_token_ids=[1, 2],
        completion_token_ids=[3],
        logprobs=[-0.5],
        loss_mask=[1],
        credit_weights=[1.0],
        reward=1.0,
        rollout_reward=1.0,
    )


def test_transitions_round_trip_through_jsonl_and_parquet(tmp_path: Path) -> None:
    rows = transition_rows([_transition(), _transition()])
    jsonl = write_rows(tmp_path / "t.jsonl", rows)
    back = [Transition.model_validate(json.loads(line)) for line in jsonl.read_text().splitlines()]
    assert back == [_transition(), _transition()]
    parquet = write_rows(tmp_path / "t.parquet", rows)
    table = pq.read_table(parquet).to_pylist()
    assert [Transition.model_validate(r) for r in table] == [_transition(), _transition()]


def test_unknown_format_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\.csv"):
        write_rows(tmp_path / "t.csv", [])


def test_sft_rows_are_request_messages_plus_reply_filtered_by_reward() -> None:
    attempts = [_attempt("good", "t", 1.0, "4"), _attempt("bad", "t", 0.0, "5")]
    rows = sft_rows(attempts, min_reward=0.5, last_call_only=True)
    assert len(rows) == 1
    assert rows[0]["messages"] == [
        *QUESTION,
        {"role": "assistant", "content": "thinking"},
        {"role": "assistant", "content": "4"},
    ]
    assert rows[0]["reward"] == 1.0 and rows[0]["rollout_id"] == "good"
    assert len(sft_rows(attempts)) == 4


def test_preference_pairs_best_against_worst_of_each_task() -> None:
    attempts = [
        _attempt("a", "t1", 0.5, "four-ish"),
        _attempt("b", "t1", 1.0, "4"),
        _attempt("c", "t1", 0.0, "5"),
        _attempt("d", "t2", 1.0, "4"),  # alone in its task
        _attempt("e", "t3", 1.0, "4"),
        _attempt("f", "t3", 1.0, "4"),  # a tie gives no preference
        _attempt("g", None, 1.0, "4"),  # no task
    ]
    rows = preference_rows(attempts)
    assert len(rows) == 1
    (row,) = rows
    assert row["task_id"] == "t1" and row["prompt"] == QUESTION
    assert row["chosen"] == [
        {"role": "assistant", "content": "thinking"},
        {"role": "assistant", "content": "4"},
    ]
    assert row["rejected"][-1] == {"role": "assistant", "content": "5"}
    assert (row["chosen_reward"], row["rejected_reward"]) == (1.0, 0.0)
    assert (row["chosen_rollout_id"], row["rejected_rollout_id"]) == ("b", "c")


def test_chat_rows_go_to_parquet_with_messages_as_json(tmp_path: Path) -> None:
    attempt = _attempt("good", "t", 1.0, "4")
    mixed = call(
        7,
        [1],
        [2],
        messages=[{"role": "user", "content": [{"type": "text", "text": "2+2?"}]}],
        rollout_id="good",
    )
    rows = sft_rows([attempt, AttemptRecords("m", None, "t", [mixed], attempt.spans)])
    back = pq.read_table(write_rows(tmp_path / "sft.parquet", rows)).to_pylist()
    assert [json.loads(r["messages"]) for r in back] == [r["messages"] for r in rows]
    assert [r["reward"] for r in back] == [r["reward"] for r in rows]
