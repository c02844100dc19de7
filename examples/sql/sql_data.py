"""Text-to-SQL tasks for the SQL example: questions with gold SQL, made from templates.

Ten templates cover selection, filters, joins, aggregates, grouping and ordering; each fills
its blanks from the database's own rows (a kind, a place, a parent's name that exists), so the
gold result is never empty. A task is ``{"id", "db_id", "question", "gold_sql", "ordered"}``.

The split is by database *and* by schema: training questions come from 4 databases of each of
six domains, held-out questions from 4 databases of the two domains in ``TEST_DOMAINS``, whose
tables the model never sees in training (as Spider holds out whole databases).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from sql_exec import run_query
from sql_schemas import DOMAINS, Domain, database_path, parse_db_id

__all__ = ["TEMPLATES", "TEST_DOMAINS", "databases", "make_task", "make_tasks"]

TEST_DOMAINS = ("hospitals", "museums")
DATABASES_PER_DOMAIN = 4

# (question, gold SQL, ordered) for one domain, with the values the question needs.
Filled = tuple[str, str, bool]
Template = Callable[[Domain, random.Random, dict[str, list[Any]]], Filled]


def _a(phrase: str) -> str:
    return f"{'an' if phrase[0] in 'aeiou' else 'a'} {phrase}"


def _join(d: Domain) -> str:
    return f"{d.child} JOIN {d.parent} ON {d.child}.{d.fk} = {d.parent}.id"


def _filter_kind(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    kind = rng.choice(seen["kinds"])
    return (
        f"List the {d.label}s of all {d.child} whose {d.kind} is {kind}.",
        f"SELECT {d.label} FROM {d.child} WHERE {d.kind} = '{kind}'",
        False,
    )


def _count_above(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    number = rng.choice(d.numbers)
    value = rng.choice(sorted(seen[number.column])[:-1])  # at least one row is above it
    return (
        f"How many {d.child} have {_a(number.phrase)} greater than {value}?",
        f"SELECT COUNT(*) FROM {d.child} WHERE {number.column} > {value}",
        False,
    )


def _list_below(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    number = rng.choice(d.numbers)
    value = rng.choice(sorted(seen[number.column])[1:6])  # a few rows are below it
    return (
        f"List the {d.label}s of the {d.child} with {_a(number.phrase)} less than {value}.",
        f"SELECT {d.label} FROM {d.child} WHERE {number.column} < {value}",
        False,
    )


def _aggregate(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    number = rng.choice(d.numbers)
    word, function = rng.choice(
        [("average", "AVG"), ("highest", "MAX"), ("lowest", "MIN"), ("total", "SUM")]
    )
    return (
        f"What is the {word} {number.phrase} of all {d.child}?",
        f"SELECT {function}({number.column}) FROM {d.child}",
        False,
    )


def _count_all(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    kind = rng.choice(seen["kinds"])
    return (
        f"How many {d.child} have {d.kind} {kind}?",
        f"SELECT COUNT(*) FROM {d.child} WHERE {d.kind} = '{kind}'",
        False,
    )


def _argmax(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    number = rng.choice(d.numbers)
    word, direction = rng.choice([("highest", "DESC"), ("lowest", "ASC")])
    return (
        f"Which {d.singular} has the {word} {number.phrase}? Give its {d.label}.",
        f"SELECT {d.label} FROM {d.child} ORDER BY {number.column} {direction} LIMIT 1",
        False,
    )


def _top_three(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    number = rng.choice(d.numbers)
    word, direction = rng.choice([("highest", "DESC"), ("lowest", "ASC")])
    return (
        f"List the {d.label}s of the 3 {d.child} with the {word} {number.phrase}, {word} first.",
        f"SELECT {d.label} FROM {d.child} ORDER BY {number.column} {direction} LIMIT 3",
        True,
    )


def _join_name(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    name = rng.choice(seen["parent_names"])
    return (
        f"List the {d.label}s of the {d.child} of the {d.parent_noun} named {name}.",
        f"SELECT {d.child}.{d.label} FROM {_join(d)} WHERE {d.parent}.name = '{name}'",
        False,
    )


def _join_count(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    place = rng.choice(seen["places"])
    return (
        f"How many {d.child} belong to a {d.parent_noun} whose {d.place} is {place}?",
        f"SELECT COUNT(*) FROM {_join(d)} WHERE {d.parent}.{d.place} = '{place}'",
        False,
    )


def _group(d: Domain, rng: random.Random, seen: dict[str, list[Any]]) -> Filled:
    return (
        f"For each {d.kind}, how many {d.child} are there?",
        f"SELECT {d.kind}, COUNT(*) FROM {d.child} GROUP BY {d.kind}",
        False,
    )


TEMPLATES: dict[str, Template] = {
    "filter": _filter_kind,
    "count_filter": _count_all,
    "count_above": _count_above,
    "list_below": _list_below,
    "aggregate": _aggregate,
    "argmax": _argmax,
    "top_three": _top_three,
    "join_filter": _join_name,
    "join_count": _join_count,
    "group": _group,
}


def databases(split: str) -> list[str]:
    """The database ids of ``split``: ``train`` never shares a domain with ``test``."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    domains = [d.name for d in DOMAINS if (d.name in TEST_DOMAINS) == (split == "test")]
    return [f"{name}_{k}" for name in domains for k in range(DATABASES_PER_DOMAIN)]


@functools.lru_cache(maxsize=64)
def _values(db_id: str) -> dict[str, list[Any]]:
    """The distinct values a template may use, read from the database (so rows match)."""
    domain, _ = parse_db_id(db_id)
    path = database_path(db_id)

    def column(sql: str) -> list[Any]:
        result = run_query(path, sql)
        if result.error is not None:
            raise RuntimeError(f"{db_id}: {sql!r} failed: {result.error}")
        return [row[0] for row in result.rows]

    child, parent = domain.child, domain.parent
    values = {
        "kinds": column(f"SELECT DISTINCT {domain.kind} FROM {child} ORDER BY 1"),
        # Only parents and places that have children, so a join question has an answer.
        "parent_names": column(f"SELECT DISTINCT {parent}.name FROM {_join(domain)} ORDER BY 1"),
        "places": column(
            f"SELECT DISTINCT {parent}.{domain.place} FROM {_join(domain)} ORDER BY 1"
        ),
    }
    for number in domain.numbers:
        values[number.column] = column(f"SELECT {number.column} FROM {child} ORDER BY 1")
    return values


def make_task(db_id: str, template: str, rng: random.Random) -> dict[str, Any]:
    """One task of ``template`` on ``db_id``, its blanks drawn with ``rng``."""
    domain, _ = parse_db_id(db_id)
    question, gold_sql, ordered = TEMPLATES[template](domain, rng, _values(db_id))
    return {
        "id": f"{db_id}:{template}:{abs(_stable_hash(question)) % 10**8:08d}",
        "db_id": db_id,
        "question": question,
        "gold_sql": gold_sql,
        "ordered": ordered,
    }


def _stable_hash(text: str) -> int:
    """A stable (not per-process salted) hash, so task ids are the same in every run."""
    value = 0
    for char in text:
        value = (value * 131 + ord(char)) % (2**61 - 1)
    return value


def make_tasks(split: str, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` distinct tasks of ``split``; the same arguments always give the same list."""
    ids = databases(split)
    rng = random.Random(f"sql:{split}:{seed}")
    names = sorted(TEMPLATES)
    tasks: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for _ in range(n * 50):
        if len(tasks) == n:
            return tasks
        task = make_task(rng.choice(ids), rng.choice(names), rng)
        if (task["db_id"], task["question"]) not in seen:
            seen.add((task["db_id"], task["question"]))
            tasks.append(task)
    if len(tasks) < n:
        raise ValueError(f"only {len(tasks)} distinct {split} questions, asked for {n}")
    return tasks
