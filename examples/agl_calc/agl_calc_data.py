"""Arithmetic word problems for the calc agent, generated from a seed, and their grading.

0.x's tutorial read its problems from parquet files; these are generated, so the example runs
offline. Eight templates, each a short story over two or three whole numbers with one or two
operations (``a * b - c``, ``a * b + c``, ``a - b + c``, ``c - a * b``, ``n / b * c``,
``a * b + c * d``, ``(a + b) * c``, ``a * (b - c)``), numbers drawn so every result is a
positive whole number and none of the story's own numbers (it must be computed, not copied).
A task is ``{"id", "template", "question", "expression", "result"}``
(``result`` is 0.x's field name).

The held-out pool (:func:`heldout_tasks`, :data:`HELDOUT_POOL` problems) is drawn first, from its
own seed; the training split (:func:`train_tasks`) draws from another seed and skips every
question of that pool, so no held-out problem is trained on. Both use every template (the model
must learn the format and the tool, not one story).
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
    "evaluate",
    "heldout_tasks",
    "make_tasks",
    "score",
    "train_tasks",
]

#: How many held-out problems there are; the training split never uses one of them.
HELDOUT_POOL = 128
#: How many training problems :func:`train_tasks` returns.
TRAIN_SIZE = 512

Values = dict[str, int]


@dataclass(frozen=True)
class Template:
    """A story with slots ``{a} {b} ...``, its arithmetic, and how to draw valid numbers."""

    name: str
    question: str
    expression: str
    draw: Callable[[random.Random], Values]


def _ints(rng: random.Random, **ranges: tuple[int, int]) -> Values:
    return {key: rng.randint(low, high) for key, (low, high) in ranges.items()}


def _apples(rng: random.Random) -> Values:
    # a * b - c: the shop sells fewer apples than it has.
    values = _ints(rng, a=(2, 20), b=(2, 9))
    values["c"] = rng.randint(1, min(30, values["a"] * values["b"] - 1))
    return values


def _change(rng: random.Random) -> Values:
    # c - a * b: the note paid is more than the tickets cost.
    values = _ints(rng, a=(2, 15), b=(2, 6))
    values["c"] = values["a"] * values["b"] + rng.randint(1, 30)
    return values


def _cartons(rng: random.Random) -> Values:
    # n / b * c: the eggs fill whole cartons.
    values = _ints(rng, b=(4, 12), c=(2, 9))
    values["n"] = values["b"] * rng.randint(2, 12)
    return values


def _broken(rng: random.Random) -> Values:
    # a * (b - c): fewer broken cups than cups in a box.
    values = _ints(rng, a=(2, 12), b=(5, 12))
    values["c"] = rng.randint(1, values["b"] - 1)
    return values


TEMPLATES: tuple[Template, ...] = (
    Template(
        "apples",
        "A shop has {a} boxes of {b} apples and sells {c} apples. How many apples are left?",
        "{a} * {b} - {c}",
        _apples,
    ),
    Template(
        "pages",
        "Nina reads {a} pages a day for {b} days and then {c} more pages. "
        "How many pages has she read?",
        "{a} * {b} + {c}",
        lambda rng: _ints(rng, a=(3, 25), b=(2, 9), c=(1, 30)),
    ),
    Template(
        "bus",
        "A bus carries {a} people. At a stop {b} people get off and {c} get on. "
        "How many people are on the bus now?",
        "{a} - {b} + {c}",
        lambda rng: _ints(rng, a=(20, 60), b=(1, 19), c=(1, 25)),
    ),
    Template(
        "change",
        "A ticket costs {a} dollars. Omar buys {b} tickets and pays with {c} dollars. "
        "How many dollars of change does he get?",
        "{c} - {a} * {b}",
        _change,
    ),
    Template(
        "cartons",
        "{n} eggs are packed into cartons of {b}, and each carton sells for {c} dollars. "
        "How many dollars do the cartons bring in?",
        "{n} / {b} * {c}",
        _cartons,
    ),
    Template(
        "garden",
        "A garden has {a} rows of {b} tulips and {c} rows of {d} roses. "
        "How many flowers are in the garden?",
        "{a} * {b} + {c} * {d}",
        lambda rng: _ints(rng, a=(2, 9), b=(2, 12), c=(2, 9), d=(2, 12)),
    ),
    Template(
        "bakery",
        "A baker makes {a} rolls and {b} buns every hour. "
        "How many rolls and buns does the baker make in {c} hours?",
        "({a} + {b}) * {c}",
        lambda rng: _ints(rng, a=(2, 15), b=(2, 15), c=(2, 8)),
    ),
    Template(
        "cups",
        "A store gets {a} boxes of {b} cups, and {c} cups in every box are broken. "
        "How many cups are not broken?",
        "{a} * ({b} - {c})",
        _broken,
    ),
)


_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression: numbers, ``+ - * /``, unary minus, parentheses.

    Parsed with :mod:`ast` and walked, never ``eval``-ed; anything else (names, calls, ``**``),
    a division by zero or a text over 200 characters raises ``ValueError``.

    >>> evaluate("(2 + 3) * 4")
    20.0
    """
    if len(expression) > 200:
        raise ValueError("the expression is too long")
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"only numbers and + - * / are allowed in {expression!r}")

    try:
        return walk(tree)
    except ZeroDivisionError as exc:
        raise ValueError(f"division by zero in {expression!r}") from exc


def _result(expression: str) -> int:
    value = evaluate(expression)
    if value <= 0 or not value.is_integer():  # the draws rule this out; a new template might not
        raise ValueError(f"{expression} = {value} is not a positive whole number")
    return int(value)


def _draw(split: str, n: int, avoid: set[str]) -> list[dict[str, Any]]:
    rng = random.Random(f"agl_calc:{split}")
    tasks: list[dict[str, Any]] = []
    seen = set(avoid)
    while len(tasks) < n:
        template = TEMPLATES[len(tasks) % len(TEMPLATES)]  # every template equally often
        values = template.draw(rng)
        question = template.question.format(**values)
        expression = template.expression.format(**values)
        # A result that is one of the story's numbers could be copied without computing.
        if question in seen or _result(expression) in values.values():
            continue
        seen.add(question)
        tasks.append(
            {
                "id": f"calc-{split}-{len(tasks)}",
                "template": template.name,
                "question": question,
                "expression": expression,
                "result": _result(expression),
            }
        )
    return tasks


def make_tasks(split: str, n: int) -> list[dict[str, Any]]:
    """``n`` problems of ``split`` (``train`` or ``heldout``); the splits share no question.

    ``heldout`` returns the first ``n`` of the :data:`HELDOUT_POOL` held-out problems;
    ``train`` skips every question of that pool.
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    if split == "heldout":
        if n > HELDOUT_POOL:
            raise ValueError(f"the held-out pool has {HELDOUT_POOL} problems, asked for {n}")
        return _draw("heldout", HELDOUT_POOL, set())[:n]
    heldout = {t["question"] for t in _draw("heldout", HELDOUT_POOL, set())}
    return _draw("train", n, heldout)


def train_tasks() -> list[dict[str, Any]]:
    """The 512 training problems (``data.train``)."""
    return make_tasks("train", TRAIN_SIZE)


def heldout_tasks() -> list[dict[str, Any]]:
    """The 128 held-out problems (``data.val``), every template in each run of eight."""
    return make_tasks("heldout", HELDOUT_POOL)


_ANSWER = re.compile(r"###\s*ANSWER:\s*(.+?)(?:\s*###|$)", re.S)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def score(answer: str, result: float) -> float:
    """1.0 when the answer's number equals ``result``, else 0.0.

    The number is the last one inside 0.x's ``### ANSWER: <answer> ###`` format, or, when the
    reply has no such marker, the last number of the reply (commas allowed: ``1,024``).
    """
    marked = _ANSWER.search(answer)
    numbers = _NUMBER.findall(marked.group(1) if marked else answer)
    if not numbers:
        return 0.0
    try:
        value = float(numbers[-1].replace(",", ""))
    except ValueError:
        return 0.0
    return 1.0 if abs(value - float(result)) < 1e-6 else 0.0
