"""The SQL example's data and reward, without LangGraph: databases, splits, guarded execution.

The databases are built from seeds, the held-out split shares no database and no schema with
training, every gold query answers its question with at least one row, and the reward is an
execution match that ignores order only where the question does, scores errors and timeouts
0, and never lets a query write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.examples.loading import example_modules

MODULES = ("sql_schemas", "sql_exec", "sql_data")


@pytest.fixture(scope="module")
def sql() -> Iterator[dict[str, ModuleType]]:
    """The example's data modules, imported as the example imports them (its directory on path)."""
    with example_modules("sql", *MODULES) as modules:
        yield dict(zip(MODULES, modules, strict=True))


def table_rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(path) as connection:
        names = [r[0] for r in connection.execute("SELECT name FROM sqlite_master ORDER BY name")]
        return {n: connection.execute(f"SELECT * FROM {n} ORDER BY id").fetchall() for n in names}


def test_databases_are_built_from_their_seed(sql: dict[str, ModuleType], tmp_path: Path) -> None:
    schemas = sql["sql_schemas"]
    first = schemas.database_path("shops_1", cache_dir=tmp_path / "a")
    again = schemas.database_path("shops_1", cache_dir=tmp_path / "b")
    other = schemas.database_path("shops_2", cache_dir=tmp_path / "a")
    assert table_rows(first) == table_rows(again)
    assert table_rows(first) != table_rows(other)
    assert len(table_rows(first)["products"]) == 24
    with pytest.raises(ValueError, match="<domain>_<seed>"):
        schemas.database_path("shops")


def test_at_least_five_schemas_with_distinct_tables(sql: dict[str, ModuleType]) -> None:
    domains = sql["sql_schemas"].DOMAINS
    assert len(domains) >= 5
    tables = [t for d in domains for t in (d.parent, d.child)]
    assert len(set(tables)) == len(tables)


def test_tasks_are_deterministic(sql: dict[str, ModuleType]) -> None:
    data = sql["sql_data"]
    assert data.make_tasks("train", 64) == data.make_tasks("train", 64)
    assert data.make_tasks("test", 64) == data.make_tasks("test", 64)
    assert data.make_tasks("test", 64) != data.make_tasks("test", 64, seed=1)
    ids = [t["id"] for t in data.make_tasks("test", 64)]
    assert len(set(ids)) == len(ids)


def test_held_out_databases_and_schemas_are_never_trained_on(sql: dict[str, ModuleType]) -> None:
    data = sql["sql_data"]
    train, test = data.make_tasks("train", 512), data.make_tasks("test", 64)
    train_dbs, test_dbs = {t["db_id"] for t in train}, {t["db_id"] for t in test}
    assert train_dbs.isdisjoint(test_dbs)
    domain = sql["sql_schemas"].parse_db_id
    train_tables = {domain(db)[0].child for db in train_dbs}
    test_tables = {domain(db)[0].child for db in test_dbs}
    assert train_tables.isdisjoint(test_tables)
    assert len(train_tables) >= 5 and len(test_tables) >= 2
    assert {t["id"].split(":")[1] for t in train} == set(data.TEMPLATES)


def test_every_gold_query_runs_and_answers_with_rows(sql: dict[str, ModuleType]) -> None:
    data, run = sql["sql_data"], sql["sql_exec"].run_query
    path = sql["sql_schemas"].database_path
    for task in data.make_tasks("train", 200) + data.make_tasks("test", 64):
        result = run(path(task["db_id"]), task["gold_sql"])
        assert result.error is None and result.rows, task
        assert all(v is not None for row in result.rows for v in row), task


@pytest.fixture
def db(sql: dict[str, ModuleType]) -> Path:
    return sql["sql_schemas"].database_path("schools_0")


def test_reward_ignores_order_unless_the_question_orders(
    sql: dict[str, ModuleType], db: Path
) -> None:
    match = sql["sql_exec"].execution_match
    gold = "SELECT name FROM students ORDER BY score DESC LIMIT 3"
    reverse = "SELECT name FROM (SELECT name, score FROM students ORDER BY score DESC LIMIT 3) "
    reverse += "ORDER BY score ASC"
    assert match(db, gold, gold, is_ordered=True) == 1.0
    assert match(db, reverse, gold, is_ordered=False) == 1.0
    assert match(db, reverse, gold, is_ordered=True) == 0.0
    # Another column, or one row more, is another answer.
    assert match(db, gold.replace("name", "name, score"), gold, is_ordered=False) == 0.0
    assert match(db, gold.replace("3", "4"), gold, is_ordered=False) == 0.0


def test_reward_compares_numbers_by_value(sql: dict[str, ModuleType], db: Path) -> None:
    match = sql["sql_exec"].execution_match
    gold = "SELECT COUNT(*) FROM students"
    assert match(db, "SELECT COUNT(*) * 1.0 FROM students", gold, is_ordered=False) == 1.0
    assert match(db, "SELECT COUNT(*) + 1 FROM students", gold, is_ordered=False) == 0.0


def test_errors_and_writes_score_zero(sql: dict[str, ModuleType], db: Path) -> None:
    exec_ = sql["sql_exec"]
    gold = "SELECT COUNT(*) FROM students"
    for bad in ("SELECT COUNT(*) FROM student", "", "not sql", f"{gold}; {gold}"):
        assert exec_.execution_match(db, bad, gold, is_ordered=False) == 0.0
    # The connection is read-only: SQLite refuses the write, the table stays.
    dropped = exec_.run_query(db, "DROP TABLE students")
    assert dropped.error is not None and "readonly" in dropped.error
    assert exec_.run_query(db, gold).rows == [(24,)]
    with pytest.raises(ValueError, match="gold query"):
        exec_.execution_match(db, gold, "SELECT nope FROM students", is_ordered=False)


def test_a_runaway_query_is_interrupted(sql: dict[str, ModuleType], db: Path) -> None:
    exec_ = sql["sql_exec"]
    # 24^6 ~ 191M rows: stopped by the progress handler, far short of finishing.
    join = "SELECT COUNT(*) FROM students a, students b, students c, students d, students e, "
    join += "students f"
    result = exec_.run_query(db, join, timeout_s=0.2)
    assert result.error == "time limit exceeded"


def test_rows_are_capped(sql: dict[str, ModuleType], db: Path) -> None:
    exec_ = sql["sql_exec"]
    many = exec_.run_query(db, "SELECT a.id FROM students a, students b", max_rows=100)
    assert len(many.rows) == 100 and many.is_truncated
    gold = "SELECT a.id FROM students a, students b"
    assert exec_.execution_match(db, gold, gold, is_ordered=False) == 0.0  # truncated: no match
    huge = exec_.run_query(db, "SELECT zeroblob(100000000)")
    assert huge.error is not None and "too big" in huge.error


def test_schema_text_is_the_create_table_lines(sql: dict[str, ModuleType], db: Path) -> None:
    text = sql["sql_exec"].schema_text(db)
    assert text.splitlines()[0].startswith("CREATE TABLE schools (")
    assert "school_id INTEGER REFERENCES schools(id)" in text
