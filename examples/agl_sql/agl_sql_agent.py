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
"""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Any, TypedDict

from agl_sql_data import SCHEMA, shop_db
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import fulmen.compat.agentlightning as agl

MAX_REWRITES = 2
MAX_ROWS = 200
TIME_LIMIT_S = 1.0  # a sampled query may join a table with itself many times over


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
    """``correct`` when the first of CORRECT / WRONG / INCORRECT in the reply is CORRECT."""
    first = re.search(r"\b(CORRECT|INCORRECT|WRONG)\b", text.upper())
    return "correct" if first is not None and first.group(1) == "CORRECT" else "wrong"


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
        return {"verdict": parse_verdict(self.ask(prompt))}

    def rewrite_query(self, state: State) -> dict[str, Any]:
        prompt = (
            f"{SCHEMA}\nQuestion: {state['question']}\nSQL: {state['query']}\n"
            f"Result: {state['result']}\nWrite a better SQLite query.\nSQL:"
        )
        return {"query": parse_sql(self.ask(prompt)), "rewrites": state["rewrites"] + 1}

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
