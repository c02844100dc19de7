"""The SQL tutorial's LangGraph agent, as an Agent Lightning 0.x ``LitAgent`` run by fulmen.

Written in 0.x style: the only fulmen line is the import (``agentlightning`` in 0.x). A
LangGraph graph writes a query for a question, runs it on a SQLite database, asks a checker
node whether it is right and rewrites it at most twice; the reward is whether the last
query's rows equal the gold query's. ``trained_agents="write"`` trains the calls of the
writing nodes (``write_query``, ``rewrite_query``), as in 0.x; under ``fulmen train`` the
config's ``algorithm.transitions.agents`` says the same.

0.x's tutorial used the Spider databases; this version builds a small shop database, so it
runs offline.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, TypedDict

from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import fulmen.compat.agentlightning as agl

SCHEMA = "CREATE TABLE products (id INTEGER, name TEXT, category TEXT, price REAL)"
ROWS = [
    (1, "kettle", "kitchen", 30.0),
    (2, "toaster", "kitchen", 25.0),
    (3, "lamp", "living", 40.0),
    (4, "sofa", "living", 400.0),
    (5, "pan", "kitchen", 18.0),
]
MAX_REWRITES = 2


def shop_db() -> sqlite3.Connection:
    """A fresh in-memory copy of the shop database."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute(SCHEMA)
    db.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", ROWS)
    return db


def sql_tasks() -> list[dict[str, Any]]:
    """Questions with gold queries."""
    pairs = [
        ("How many products are in the kitchen category?",
         "SELECT COUNT(*) FROM products WHERE category = 'kitchen'"),
        ("What is the most expensive product?",
         "SELECT name FROM products ORDER BY price DESC LIMIT 1"),
        ("List the names of living products.",
         "SELECT name FROM products WHERE category = 'living'"),
        ("What is the total price of all products?", "SELECT SUM(price) FROM products"),
    ]  # fmt: skip
    return [{"id": f"sql{i}", "question": q, "gold": g} for i, (q, g) in enumerate(pairs)]


def run_sql(db: sqlite3.Connection, query: str) -> tuple[list[Any] | None, str]:
    """Rows and a short text of them, or ``None`` and the error."""
    try:
        rows = db.execute(query).fetchall()
    except sqlite3.Error as exc:
        return None, f"error: {exc}"
    return rows, repr(rows[:5])


def parse_sql(text: str) -> str:
    """The query in a reply: a fenced block or the text up to the first ';'."""
    fenced = re.search(r"```(?:sql)?\s*(.*?)```", text, re.S)
    body = fenced.group(1) if fenced else text
    return body.split(";")[0].strip()


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

    def ask(self, prompt: str) -> str:
        return str(self.llm.invoke([HumanMessage(content=prompt)]).content)

    def write_query(self, state: State) -> dict[str, Any]:
        prompt = f"{SCHEMA}\nWrite one SQLite query for: {state['question']}\nSQL:"
        return {"query": parse_sql(self.ask(prompt))}

    def execute_query(self, state: State) -> dict[str, Any]:
        return {"result": run_sql(self.db, state["query"])[1]}

    def check_query(self, state: State) -> dict[str, Any]:
        prompt = (
            f"Question: {state['question']}\nSQL: {state['query']}\nResult: {state['result']}\n"
            "Is the query right? Answer CORRECT or WRONG."
        )
        return {"verdict": "correct" if "CORRECT" in self.ask(prompt).upper() else "wrong"}

    def rewrite_query(self, state: State) -> dict[str, Any]:
        prompt = (
            f"{SCHEMA}\nQuestion: {state['question']}\nSQL: {state['query']}\n"
            f"Result: {state['result']}\nWrite a better SQLite query.\nSQL:"
        )
        return {"query": parse_sql(self.ask(prompt)), "rewrites": state["rewrites"] + 1}

    def after_execute(self, state: State) -> str:
        if state["rewrites"] >= MAX_REWRITES:
            return END
        return "rewrite_query" if state["result"].startswith("error") else "check_query"

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
        chat = ChatOpenAI(
            model=llm.model,
            base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            api_key=llm.api_key or "none",  # type: ignore[arg-type]
            temperature=llm.sampling_parameters.get("temperature", 0.0),
            max_completion_tokens=96,
            max_retries=0,
        )
        db = shop_db()
        try:
            state = SQLGraph(chat, db).graph().invoke(
                {"question": task["question"], "query": "", "result": "", "verdict": "",
                 "rewrites": 0}
            )  # fmt: skip
            got, _ = run_sql(db, state["query"])
            gold, _ = run_sql(db, task["gold"])
        finally:
            db.close()
        same = got is not None and sorted(map(repr, got)) == sorted(map(repr, gold or []))
        return 1.0 if same else 0.0
