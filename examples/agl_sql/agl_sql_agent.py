"""The SQL tutorial's LangGraph agent, as an Agent Lightning 0.x ``LitAgent`` run by fulmen.

Written in 0.x style: the only fulmen line is the import (``agentlightning`` in 0.x). As in
0.x's tutorial, a LangGraph graph writes a query for a question, runs it on a SQLite database,
asks a checker node whether it is right and, while the checker says it is wrong, rewrites it (at
most twice); the reward is whether the last query's rows equal the gold query's.
``trained_agents="write"`` trains the calls of the writing nodes (``write_query``,
``rewrite_query``) and not the checker's, as in 0.x; under ``fulmen train`` the config's
``algorithm.transitions.agents`` says the same.

0.x's tutorial used the Spider databases; this version builds a shop database in memory
(``agl_sql_data``: the database, training and held-out questions), so it runs offline.

The tutorial served an instruction-tuned model; this version is also measured on a small *base*
model (Gemma 3 270M), which answered none of 16 held-out questions when only asked: it went on
writing the schema. So each node's prompt is a few worked examples as chat turns (on the shop's
tables, with questions unlike the tasks' and names from the training half only, so no answer
can be copied), the tables are shown compactly (``products(id, name, ...)``) and every reply is
stopped at the end of its one line.
"""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Any, TypedDict

from agl_sql_data import SCHEMA, shop_db
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import fulmen.compat.agentlightning as agl

MAX_REWRITES = 2
MAX_ROWS = 200
TIME_LIMIT_S = 1.0  # a sampled query may join a table with itself many times over
#: A query and a verdict are one line; a base model goes on past it (another turn, the prompt).
SQL_STOP = [";", "\n"]
VERDICT_STOP = ["\n"]


def compact_schema(schema: str) -> str:
    """``CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)`` lines as ``t(a, b)`` lines.

    >>> compact_schema("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
    't(a, b)'
    """
    tables = re.findall(r"CREATE TABLE (\w+) \((.*)\)", schema)
    return "\n".join(f"{name}({', '.join(c.split()[0] for c in cols.split(','))})"
                     for name, cols in tables)  # fmt: skip


WRITE = (
    "Write one SQLite query that answers the question.\n\nTables:\n{schema}\n\nQuestion: {question}"
)
#: (question, query) on the shop's tables, with names and numbers from the training half only.
#: A base model this small mostly writes the shape of an example, so each example is the shape
#: of some tasks on another column (the stock of a product, not its price), and others (the
#: cheapest product, an average, a count per city, a join's aggregate) have none: the room to
#: learn. The last is a plain filter: the model leans on the last example.
WRITE_EXAMPLES = (
    ("List the quantities of the orders of the toaster.",
     "SELECT quantity FROM orders JOIN products ON orders.product_id = products.id "
     "WHERE products.name = 'toaster';"),
    ("How many products have more than 30 items in stock?",
     "SELECT COUNT(*) FROM products WHERE stock > 30;"),
    ("What is the stock of the kettle?", "SELECT stock FROM products WHERE name = 'kettle';"),
)  # fmt: skip
CHECK = (
    "Question: {question}\nSQL: {query}\nResult: {result}\n"
    "Is the query right? Answer CORRECT or WRONG."
)
#: (question, query, result, verdict), the results as ``run_sql`` writes them. The last says
#: CORRECT: a greedy base model repeats the last verdict, and a checker that calls every query
#: wrong has the rewriter break the right ones.
CHECK_EXAMPLES = (
    ("What is the total quantity of all orders?", "SELECT SUM(quantity) FROM order",
     'error: near "order": syntax error', "WRONG"),
    ("How many customers are there?", "SELECT COUNT(*) FROM customers", "[(36,)]", "CORRECT"),
    ("Which customers ordered the kettle?", "SELECT name FROM customers WHERE name = 'kettle'",
     "[]", "WRONG"),
    ("Which city does Bo Kim live in?", "SELECT city FROM customers WHERE name = 'Bo Kim'",
     "[('Leeds',)]", "CORRECT"),
)  # fmt: skip
REWRITE = (
    "Tables:\n{schema}\n\nQuestion: {question}\nSQL: {query}\nResult: {result}\n"
    "Write a better SQLite query."
)
REWRITE_EXAMPLE = (
    "What is the total quantity of all orders?",
    "SELECT SUM(quantity) FROM order",
    'error: near "order": syntax error',
    "SELECT SUM(quantity) FROM orders;",
)


def run_sql(db: sqlite3.Connection, query: str) -> tuple[list[Any] | None, str]:
    """Rows and a short text of them, or ``None`` and the error.

    A query that runs past ``TIME_LIMIT_S`` is interrupted and one returning more than
    ``MAX_ROWS`` rows counts as an error, so a runaway query cannot stall the rollout.
    """
    deadline = time.monotonic() + TIME_LIMIT_S
    db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        rows = db.execute(query).fetchmany(MAX_ROWS + 1)
    except sqlite3.Error as exc:
        return None, f"error: {exc}"
    finally:
        db.set_progress_handler(None, 0)
    if len(rows) > MAX_ROWS:
        return None, f"error: more than {MAX_ROWS} rows"
    return rows, repr(rows[:5])


_SELECT = re.compile(r"\b(?:SELECT|WITH)\b.*", re.I | re.S)


def parse_sql(text: str) -> str:
    """The query in a reply: a fenced block, else from ``SELECT`` to ``;`` or the line's end."""
    fenced = re.search(r"```(?:sql|sqlite)?\s*(.*?)```", text, re.S)
    if fenced:
        return fenced.group(1).split(";")[0].strip()
    found = _SELECT.search(text)
    return re.split(r";|\n", found.group(0) if found else text)[0].strip()


def parse_verdict(text: str) -> str:
    """``correct`` when the first of CORRECT / WRONG / INCORRECT in the reply is CORRECT.

    Only a word's start is matched: a base model's reply may run on into other text with no
    space (``CORRECTに``), and ``INCORRECT`` must not read as ``CORRECT``.
    """
    first = re.search(r"\b(CORRECT|INCORRECT|WRONG)", text.upper())
    return "correct" if first is not None and first.group(1) == "CORRECT" else "wrong"


def write_messages(schema: str, question: str) -> list[BaseMessage]:
    """The writer's prompt: the worked examples as chat turns, then the question."""
    messages: list[BaseMessage] = []
    for example, query in WRITE_EXAMPLES:
        messages += [
            HumanMessage(WRITE.format(schema=schema, question=example)),
            AIMessage(query),
        ]
    return [*messages, HumanMessage(WRITE.format(schema=schema, question=question))]


def check_messages(question: str, query: str, result: str) -> list[BaseMessage]:
    """The checker's prompt: judged examples as chat turns, then the query to judge."""
    messages: list[BaseMessage] = []
    for example, example_query, example_result, verdict in CHECK_EXAMPLES:
        text = CHECK.format(question=example, query=example_query, result=example_result)
        messages += [HumanMessage(text), AIMessage(verdict)]
    return [*messages, HumanMessage(CHECK.format(question=question, query=query, result=result))]


def rewrite_messages(schema: str, question: str, query: str, result: str) -> list[BaseMessage]:
    """The rewriter's prompt: one corrected example as chat turns, then the query to fix."""
    example, bad, bad_result, fixed = REWRITE_EXAMPLE
    return [
        HumanMessage(REWRITE.format(schema=schema, question=example, query=bad,
                                    result=bad_result)),
        AIMessage(fixed),
        HumanMessage(REWRITE.format(schema=schema, question=question, query=query,
                                    result=result)),
    ]  # fmt: skip


class State(TypedDict):
    question: str
    query: str
    result: str
    verdict: str
    rewrites: int


class SQLGraph:
    """The write → execute → check → rewrite graph of 0.x's SQL tutorial."""

    def __init__(self, llm: ChatOpenAI, db: sqlite3.Connection) -> None:
        self.llm = llm
        self.db = db
        self.schema = compact_schema(SCHEMA)

    def ask(self, messages: list[BaseMessage], stop: list[str]) -> str:
        return str(self.llm.invoke(messages, stop=stop).content)

    def write_query(self, state: State) -> dict[str, Any]:
        reply = self.ask(write_messages(self.schema, state["question"]), SQL_STOP)
        return {"query": parse_sql(reply)}

    def execute_query(self, state: State) -> dict[str, Any]:
        return {"result": run_sql(self.db, state["query"])[1]}

    def check_query(self, state: State) -> dict[str, Any]:
        messages = check_messages(state["question"], state["query"], state["result"])
        return {"verdict": parse_verdict(self.ask(messages, VERDICT_STOP))}

    def rewrite_query(self, state: State) -> dict[str, Any]:
        messages = rewrite_messages(self.schema, state["question"], state["query"], state["result"])
        return {"query": parse_sql(self.ask(messages, SQL_STOP)), "rewrites": state["rewrites"] + 1}

    def after_execute(self, state: State) -> str:
        # The last rewrite is final: a verdict on it could change nothing.
        return END if state["rewrites"] >= MAX_REWRITES else "check_query"

    def after_check(self, state: State) -> str:
        return END if state["verdict"] == "correct" else "rewrite_query"

    def graph(self) -> Any:
        builder = StateGraph(State)
        builder.add_node("write_query", self.write_query)
        builder.add_node("execute_query", self.execute_query)
        builder.add_node("check_query", self.check_query)
        builder.add_node("rewrite_query", self.rewrite_query)
        builder.add_edge(START, "write_query")
        builder.add_edge("write_query", "execute_query")
        builder.add_conditional_edges("execute_query", self.after_execute)
        builder.add_conditional_edges("check_query", self.after_check)
        builder.add_edge("rewrite_query", "execute_query")
        return builder.compile()


class LitSQLAgent(agl.LitAgent[dict[str, Any]]):
    """The graph as a 0.x class-form agent: ``rollout`` for both modes."""

    def __init__(self, trained_agents: str | None = r"write") -> None:
        super().__init__(trained_agents=trained_agents)

    def rollout(
        self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.AttemptedRollout
    ) -> float:
        llm: agl.LLM = resources["main_llm"]
        # No token limit here: the run's sampling settings cap every call (a limit set here as
        # max_completion_tokens would win over the config's max_tokens).
        chat = ChatOpenAI(
            model=llm.model,
            base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            api_key=llm.api_key or "none",  # type: ignore[arg-type]
            temperature=llm.sampling_parameters.get("temperature", 0.0),
            max_retries=0,
        )
        db = shop_db()
        try:
            gold, error = run_sql(db, task["gold"])
            if gold is None:
                raise ValueError(f"the gold query of {task['id']} failed: {error}")
            state = SQLGraph(chat, db).graph().invoke(
                {"question": task["question"], "query": "", "result": "", "verdict": "",
                 "rewrites": 0}
            )  # fmt: skip
            got, _ = run_sql(db, state["query"])
        finally:
            db.close()
        same = got is not None and sorted(map(repr, got)) == sorted(map(repr, gold))
        return 1.0 if same else 0.0
