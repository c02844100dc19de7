"""The math example's problems and scoring: deterministic, held out, exact (no AutoGen needed)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.examples.loading import example_modules


@pytest.fixture(scope="module")
def data() -> Iterator[ModuleType]:
    with example_modules("math", "math_data") as (module,):
        yield module


def test_problems_are_deterministic_and_well_formed(data: ModuleType) -> None:
    train = data.make_tasks("train", 512)
    assert train == data.make_tasks("train", 512)
    assert data.make_tasks("test", 64) == data.make_tasks("test", 64)
    assert data.make_tasks("train", 512, seed=1) != train
    assert {t["template"] for t in train} == {t.name for t in data.TEMPLATES}
    for task in train:
        assert task["answer"] > 0 and isinstance(task["answer"], int)
        assert data.evaluate(task["expression"]) == task["answer"]
        # Two or three operations per problem.
        assert 2 <= sum(task["expression"].count(op) for op in "+-*/") <= 3, task
    assert len({t["id"] for t in train}) == len(train)


def test_held_out_questions_never_appear_in_training(data: ModuleType) -> None:
    pool = {t["question"] for t in data.make_tasks("test", data.HELDOUT_POOL)}
    train = data.make_tasks("train", 2048)
    assert len(pool) == data.HELDOUT_POOL
    assert not pool & {t["question"] for t in train}
    # The 64 held-out tasks of the config are the start of the pool.
    assert data.make_tasks("test", 64) == data.make_tasks("test", data.HELDOUT_POOL)[:64]
    with pytest.raises(ValueError, match="held-out pool"):
        data.make_tasks("test", data.HELDOUT_POOL + 1)
    with pytest.raises(ValueError, match="split"):
        data.make_tasks("dev", 4)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ANSWER: 42", 42.0),
        ("ANSWER:42", 42.0),
        ("answer: -3", -3.0),
        ("ANSWER: $1,024", 1024.0),
        ("ANSWER: 7.5 dollars", 7.5),
        ("ANSWER: 13 </tool_response> ANSWER: 99", 13.0),  # the first ANSWER counts
        ("There are 3 boxes, so 12 apples.", 12.0),  # no ANSWER: the last number
        ("I do not know.", None),
        ("", None),
        (None, None),
    ],
)
def test_final_answer(data: ModuleType, text: str | None, expected: float | None) -> None:
    assert data.final_answer(text) == expected


def test_score_is_exact(data: ModuleType) -> None:
    assert data.score("ANSWER: 42", 42) == 1.0
    assert data.score("ANSWER: 42.0", 42) == 1.0
    assert data.score("ANSWER: 41", 42) == 0.0
    assert data.score("ANSWER: 42.5", 42) == 0.0
    assert data.score("The answer is 4 2", 42) == 0.0
    assert data.score(None, 42) == 0.0


def test_calculator_arithmetic_is_safe(data: ModuleType) -> None:
    assert data.evaluate("(12 * 9 - 3) / 5") == 21
    assert data.evaluate("-2 + +3") == 1
    assert data.evaluate(" 7.5 * 2 ") == 15
    for bad in [
        "__import__('os').system('true')",
        "2 ** 10",
        "abs(-2)",
        "x + 1",
        "True + 1",
        "3 packs of 4 - 9",
        "1 / 0",
        "9" * 13 + " * 10",
        "1" + " + 1" * 200,
        "",
    ]:
        with pytest.raises(ValueError):
            data.evaluate(bad)
