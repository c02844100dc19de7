"""Word problems for the math example, generated from a seed (no download), and their scoring.

Each problem is GSM8K-style: a short story with two or three arithmetic steps (``+ - * /``),
whole numbers throughout, a whole-number answer. A task is a JSON object
``{"id", "template", "question", "expression", "answer"}``. The ``test`` split (held out) is
drawn first; the ``train`` split draws from the same templates with another seed and skips every
question of the held-out pool, so no held-out question is ever trained on.

The answer format: the agent's final message states the answer as ``ANSWER: <number>``;
:func:`final_answer` reads the number after the first ``ANSWER:`` (what a model writes after
stating its answer is not part of it), or, when the model wrote no ``ANSWER:``, the last number
in the message. :func:`score` is 1.0 when that number equals the
task's answer exactly, else 0.0.
"""

from __future__ import annotations

import ast
import operator
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HELDOUT_POOL",
    "TEMPLATES",
    "Template",
    "evaluate",
    "final_answer",
    "make_tasks",
    "score",
]

#: How many held-out questions the ``test`` split reserves; ``train`` never uses any of them.
HELDOUT_POOL = 256

Values = dict[str, int]


@dataclass(frozen=True)
class Template:
    """A story with slots ``{a} {b} ...``, its expression, and how to draw valid numbers."""

    name: str
    question: str
    expression: str
    draw: Callable[[random.Random], Values]

    def fill(self, values: Values) -> tuple[str, str]:
        """The question text and the expression for ``values``."""
        return self.question.format(**values), self.expression.format(**values)


def _ints(rng: random.Random, **ranges: tuple[int, int]) -> Values:
    return {key: rng.randint(low, high) for key, (low, high) in ranges.items()}


def _share(rng: random.Random) -> Values:
    # n cookies shared by b kids, each eats c: n must divide evenly and leave something.
    values = _ints(rng, a=(3, 12), b=(2, 9), c=(1, 2))
    values["n"] = values["a"] * values["b"]
    return values


def _bags(rng: random.Random) -> Values:
    # (a * b - c) apples packed into bags of d: a whole number of bags.
    d = rng.randint(2, 6)
    bags = rng.randint(3, 15)
    a = rng.randint(2, 9)
    total = bags * d
    b = total // a + 1  # smallest b with a * b > total: at least one apple is rotten
    return {"a": a, "b": b, "c": a * b - total, "d": d}


TEMPLATES: tuple[Template, ...] = (
    Template(
        "packs",
        "Mia buys {a} packs of {b} pencils and gives {c} pencils to her friends. "
        "How many pencils does Mia have left?",
        "{a} * {b} - {c}",
        lambda rng: _ints(rng, a=(2, 9), b=(3, 12), c=(1, 9)),
    ),
    Template(
        "desks",
        "A classroom has {a} rows of {b} desks, and the teacher brings in {c} more desks. "
        "How many desks are in the classroom?",
        "{a} * {b} + {c}",
        lambda rng: _ints(rng, a=(2, 9), b=(3, 12), c=(1, 9)),
    ),
    Template(
        "marbles",
        "Leo has {a} marbles. He wins {b} more marbles and then loses {c}. "
        "How many marbles does Leo have now?",
        "{a} + {b} - {c}",
        lambda rng: _ints(rng, a=(10, 60), b=(2, 30), c=(1, 9)),
    ),
    Template(
        "bikes",
        "A shop sells {a} red bikes and {b} blue bikes every day. "
        "How many bikes does the shop sell in {c} days?",
        "({a} + {b}) * {c}",
        lambda rng: _ints(rng, a=(2, 12), b=(2, 12), c=(2, 7)),
    ),
    Template(
        "cookies",
        "{n} cookies are shared equally among {b} kids, and each kid eats {c} of them. "
        "How many cookies does each kid have left?",
        "{n} / {b} - {c}",
        _share,
    ),
    Template(
        "orchard",
        "A farmer plants {a} rows of {b} apple trees and {c} rows of {d} pear trees. "
        "How many trees does the farmer plant?",
        "{a} * {b} + {c} * {d}",
        lambda rng: _ints(rng, a=(2, 9), b=(2, 12), c=(2, 9), d=(2, 12)),
    ),
    Template(
        "wages",
        "Sam earns {a} dollars an hour and works {b} hours. He spends {c} dollars on lunch "
        "and {d} dollars on a bus ticket. How many dollars does Sam have left?",
        "{a} * {b} - {c} - {d}",
        lambda rng: _ints(rng, a=(5, 20), b=(2, 8), c=(2, 9), d=(1, 5)),
    ),
    Template(
        "bags",
        "There are {a} boxes with {b} apples in each box. {c} apples are rotten, and the rest "
        "are packed into bags of {d}. How many bags are filled?",
        "({a} * {b} - {c}) / {d}",
        _bags,
    ),
)

_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_MAX_MAGNITUDE = 1e12  # refuse results no word problem needs (and huge intermediate numbers)


def evaluate(expression: str) -> float:
    """Evaluate ``+ - * /``, unary minus and parentheses over numbers, without ``eval``.

    The expression is parsed with :mod:`ast` and only number literals and those operators are
    walked; anything else (names, calls, attributes, ``**``) raises ``ValueError``, as do
    division by zero and results beyond 1e12.

    >>> evaluate("(2 + 3) * 4")
    20
    """
    if len(expression) > 200:
        raise ValueError("expression is too long")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
        ):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            value = _OPS[type(node.op)](walk(node.left), walk(node.right))
            if abs(value) > _MAX_MAGNITUDE:
                raise ValueError(f"result too large in {expression!r}")
            return value
        raise ValueError(f"unsupported syntax in {expression!r}")

    try:
        return walk(tree)
    except ZeroDivisionError as exc:
        raise ValueError(f"division by zero in {expression!r}") from exc


_ANSWER = re.compile(r"ANSWER:\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str | None) -> float | None:
    """The number the final message gives: after the first ``ANSWER:``, else the last number.

    >>> final_answer("The bags hold 12 apples. ANSWER: 1,024 ANSWER: 5")
    1024.0
    >>> final_answer("So Leo has 41 marbles.")
    41.0
    """
    if not text:
        return None
    answers = _ANSWER.findall(text)
    found = answers[0] if answers else (_NUMBER.findall(text) or [None])[-1]
    if found is None:
        return None
    try:
        return float(found.replace(",", ""))
    except ValueError:  # a lone "-" or "," run cannot reach here, but a "1,,2" might
        return None


def score(text: str | None, answer: float) -> float:
    """1.0 when the final message's number (:func:`final_answer`) equals ``answer``, else 0.0."""
    given = final_answer(text)
    return 1.0 if given is not None and abs(given - answer) < 1e-6 else 0.0


def _one_task(rng: random.Random, index: int, split: str) -> dict[str, Any]:
    template = rng.choice(TEMPLATES)
    while True:
        question, expression = template.fill(template.draw(rng))
        answer = evaluate(expression)
        if answer > 0 and float(answer).is_integer():
            break
    return {
        "id": f"{split}-{index}",
        "template": template.name,
        "question": question,
        "expression": expression,
        "answer": int(answer),
    }


def _draw(split: str, n: int, seed: int, avoid: set[str]) -> list[dict[str, Any]]:
    rng = random.Random(f"math:{split}:{seed}")
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(tasks) < n:
        task = _one_task(rng, len(tasks), split)
        if task["question"] in avoid or task["question"] in seen:
            continue
        seen.add(task["question"])
        tasks.append(task)
    return tasks


def make_tasks(split: str, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` problems of ``split`` (``train`` or ``test``); the splits never share a question.

    ``test`` returns the first ``n`` of a pool of :data:`HELDOUT_POOL` held-out problems;
    ``train`` skips every question in that pool.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if split == "test":
        if n > HELDOUT_POOL:
            raise ValueError(f"the held-out pool has {HELDOUT_POOL} problems, asked for {n}")
        return _draw("test", HELDOUT_POOL, seed, set())[:n]
    heldout = {t["question"] for t in _draw("test", HELDOUT_POOL, seed, set())}
    return _draw("train", n, seed, heldout)
