"""Arithmetic word problems for the calc example, generated with a seed (no download).

Each task is a JSON object ``{"id", "question", "expression", "answer"}``. The ``train`` and
``test`` splits draw from the same templates with different seeds and never share a question,
so held-out accuracy measures generalisation to new numbers, not memorisation.
"""

from __future__ import annotations

import ast
import operator
import random
from collections.abc import Callable
from typing import Any

__all__ = ["TEMPLATES", "evaluate_expression", "make_tasks"]

# (question template, expression template); {a} {b} {c} are small positive integers.
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("Tom has {a} apples and buys {b} more. How many apples does Tom have now?", "{a} + {b}"),
    ("A shelf holds {a} books. {b} books are taken away. How many books are left?", "{a} - {b}"),
    ("There are {a} boxes with {b} pens in each box. How many pens are there?", "{a} * {b}"),
    (
        "A baker makes {a} rolls in each of {b} batches, then sells {c}. How many rolls remain?",
        "{a} * {b} - {c}",
    ),
    (
        "Sara saves {a} coins a day for {b} days and then finds {c} more. How many coins?",
        "{a} * {b} + {c}",
    ),
    (
        "A farm has {a} hens and {b} ducks. Each bird lays {c} eggs. How many eggs in total?",
        "({a} + {b}) * {c}",
    ),
    (
        "A train has {a} cars with {b} seats each. {c} seats are empty. How many are taken?",
        "{a} * {b} - {c}",
    ),
)

_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate_expression(expression: str) -> float:
    """Evaluate ``+ - * /`` and parentheses over numbers; anything else raises ``ValueError``.

    >>> evaluate_expression("(2 + 3) * 4")
    20
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported syntax in {expression!r}")

    try:
        return walk(tree)
    except ZeroDivisionError as exc:
        raise ValueError(f"division by zero in {expression!r}") from exc


def _one_task(rng: random.Random, index: int, split: str) -> dict[str, Any]:
    question, expression = rng.choice(TEMPLATES)
    while True:
        values = {"a": rng.randint(2, 19), "b": rng.randint(2, 19), "c": rng.randint(1, 9)}
        expr = expression.format(**values)
        answer = evaluate_expression(expr)
        if answer > 0:
            break
    return {
        "id": f"{split}-{index}",
        "question": question.format(**values),
        "expression": expr,
        "answer": int(answer),
    }


def make_tasks(split: str, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` tasks of ``split`` (``train`` or ``test``); the splits never share a question."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"{split}:{seed}")
    avoid: set[str] = set()
    if split == "train":  # keep the held-out questions out of training
        avoid = {t["question"] for t in make_tasks("test", 500, seed=seed)}
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(tasks) < n:
        task = _one_task(rng, len(tasks), split)
        if task["question"] in avoid or task["question"] in seen:
            continue
        seen.add(task["question"])
        tasks.append(task)
    return tasks
