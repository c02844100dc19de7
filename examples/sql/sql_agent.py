"""A LangGraph text-to-SQL agent: write a query, run it, let a checker judge it, rewrite it.

The graph is plain LangGraph with LangChain's ``ChatOpenAI``::

    START -> write_query -> execute_query -> check_query -> END
                                 ^               | WRONG (at most two rewrites)
                                 +- rewrite_query <+

``execute_query`` runs the SQL read-only with a time limit and a row cap (``sql_exec``). A
query that failed or returned no rows goes to the rewriter without a checker call (there is
nothing to judge), and after the second rewrite the graph ends without asking the checker.

The prompts carry the database's ``CREATE TABLE`` lines and a few worked examples on a small
``pets`` schema, in a format a *base* model can continue: the model answers with one line of
SQL, or with ``CORRECT`` / ``WRONG``.

The only fulmen lines are the ``@fulmen.rollout`` wrapper, the model's address from ``llm``,
and the returned reward (execution match of the final query with the gold query). Each call is
attributed to its LangGraph node by name, so a config can train ``write_query`` and
``rewrite_query`` only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from openai import DefaultAsyncHttpxClient
from pydantic import SecretStr
from sql_data import make_tasks
from sql_exec import QueryResult, execution_match, run_query, schema_text
from sql_schemas import database_path

import fulmen

__all__ = ["build_graph", "parse_sql", "parse_verdict", "sql_agent", "test_tasks", "train_tasks"]

MAX_REWRITES = 2
# A query is one line; the base model tends to go on past it (another turn, the prompt again).
SQL_STOP = [";", "\n"]

PETS_SCHEMA = (
    "CREATE TABLE owners (id INTEGER PRIMARY KEY, name TEXT, city TEXT);\n"
    "CREATE TABLE pets (id INTEGER PRIMARY KEY, name TEXT, species TEXT, age INTEGER, "
    "weight INTEGER, owner_id INTEGER REFERENCES owners(id));"
)
WRITE = "Write one SQLite query that answers the question.\n\n{schema}\n\nQuestion: {question}"
WRITE_EXAMPLES = (
    (
        "List the names of the pets of the owner named Ann Lee.",
        "SELECT pets.name FROM pets JOIN owners ON pets.owner_id = owners.id "
        "WHERE owners.name = 'Ann Lee';",
    ),
    (
        "How many pets have an age greater than 5?",
        "SELECT COUNT(*) FROM pets WHERE age > 5;",
    ),
    (
        "List the names of all pets whose species is dog.",
        "SELECT name FROM pets WHERE species = 'dog';",
    ),
)
CHECK = (
    "Question: {question}\nSQL: {query}\nResult: {result}\n\n"
    "Does the SQL answer the question? Answer CORRECT or WRONG."
)
CHECK_EXAMPLES = (
    ("What is the average weight of all pets?", "SELECT AVG(weight) FROM pet",
     "error: no such table: pet", "WRONG"),
    ("How many pets have species cat?", "SELECT COUNT(*) FROM pets WHERE species = 'cat'", "4",
     "CORRECT"),
    ("List the names of the pets of the owner named Bo Kim.",
     "SELECT name FROM pets WHERE name = 'Bo Kim'", "no rows", "WRONG"),
    ("List the names of the pets older than 9.", "SELECT name FROM pets WHERE age > 9",
     "Rex; Tom; Fluffy", "CORRECT"),
)  # fmt: skip
REWRITE = (
    "The SQL query is wrong. Write a corrected SQLite query.\n\n{schema}\n\n"
    "Question: {question}\nSQL: {query}\nResult: {result}"
)
REWRITE_EXAMPLE = (
    "What is the average weight of all pets?",
    "SELECT AVG(weight) FROM pet",
    "error: no such table: pet",
    "SELECT AVG(weight) FROM pets;",
)

_SELECT = re.compile(r"\b(SELECT|WITH)\b.*", re.IGNORECASE | re.DOTALL)


class SQLState(TypedDict):
    """The graph's state: the question and database, then the query and what it returned.

    A node reads the whole state and returns only the keys it changes (a partial update).
    """

    question: str
    db_path: str
    schema: str
    query: str
    result: QueryResult
    verdict: Literal["correct", "wrong"]
    rewrites: int


def parse_sql(text: str) -> str:
    """The first SQL statement in a model reply: from ``SELECT`` to ``;``, a newline or a fence.

    >>> parse_sql("```sql\\nSELECT name FROM pets;\\n```")
    'SELECT name FROM pets'
    """
    match = _SELECT.search(text)
    if match is None:
        return text.strip()
    return re.split(r";|\n|```", match.group(0))[0].strip()


def parse_verdict(text: str) -> Literal["correct", "wrong"]:
    """``wrong`` when the checker's reply starts with WRONG (or INCORRECT), else ``correct``.

    Only the start counts: a base model may go on to echo the prompt, which names both words.

    >>> parse_verdict("WRONG: the table is pets"), parse_verdict("CORRECT or WRONG")
    ('wrong', 'correct')
    """
    return "wrong" if re.match(r"\W*(WRONG|INCORRECT)", text.upper()) else "correct"


def _write_messages(state: SQLState) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for question, sql in WRITE_EXAMPLES:
        messages += [
            HumanMessage(WRITE.format(schema=PETS_SCHEMA, question=question)),
            AIMessage(sql),
        ]
    return [*messages, HumanMessage(WRITE.format(**state))]


def _check_messages(state: SQLState) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for question, query, result, verdict in CHECK_EXAMPLES:
        messages += [
            HumanMessage(CHECK.format(question=question, query=query, result=result)),
            AIMessage(verdict),
        ]
    text = CHECK.format(
        question=state["question"], query=state["query"], result=state["result"].render()
    )
    return [*messages, HumanMessage(text)]


def _rewrite_messages(state: SQLState) -> list[BaseMessage]:
    question, query, result, fixed = REWRITE_EXAMPLE
    example = REWRITE.format(schema=PETS_SCHEMA, question=question, query=query, result=result)
    text = REWRITE.format(
        schema=state["schema"],
        question=state["question"],
        query=state["query"],
        result=state["result"].render(),
    )
    return [HumanMessage(example), AIMessage(fixed), HumanMessage(text)]


def build_graph(model: ChatOpenAI) -> Any:
    """The compiled write -> execute -> check -> rewrite graph around ``model``."""

    async def write_query(state: SQLState) -> dict[str, Any]:
        reply = await model.ainvoke(_write_messages(state), stop=SQL_STOP)
        return {"query": parse_sql(str(reply.content))}

    def execute_query(state: SQLState) -> dict[str, Any]:
        return {"result": run_query(Path(state["db_path"]), state["query"])}

    async def check_query(state: SQLState) -> dict[str, Any]:
        result = state["result"]
        if result.error is not None or not result.rows:
            return {"verdict": "wrong"}  # nothing to judge: a failed or empty query is redone
        reply = await model.ainvoke(_check_messages(state), stop=["\n"])
        return {"verdict": parse_verdict(str(reply.content))}

    async def rewrite_query(state: SQLState) -> dict[str, Any]:
        reply = await model.ainvoke(_rewrite_messages(state), stop=SQL_STOP)
        return {"query": parse_sql(str(reply.content)), "rewrites": state["rewrites"] + 1}

    def after_execute(state: SQLState) -> str:
        # The last rewrite is final: a verdict on it could change nothing.
        return END if state["rewrites"] >= MAX_REWRITES else "check_query"

    def after_check(state: SQLState) -> str:
        return "rewrite_query" if state["verdict"] == "wrong" else END

    graph = StateGraph(SQLState)
    graph.add_node("write_query", write_query)
    graph.add_node("execute_query", execute_query)
    graph.add_node("check_query", check_query)
    graph.add_node("rewrite_query", rewrite_query)
    graph.add_edge(START, "write_query")
    graph.add_edge("write_query", "execute_query")
    graph.add_conditional_edges("execute_query", after_execute, ["check_query", END])
    graph.add_conditional_edges("check_query", after_check, ["rewrite_query", END])
    graph.add_edge("rewrite_query", "execute_query")
    return graph.compile()


@fulmen.rollout
async def sql_agent(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Answer one question; reward 1.0 when the final query returns the gold query's rows."""
    db = database_path(task["db_id"])
    # Our own HTTP client, closed when the rollout ends (LangChain's default one is cached per
    # base URL, and every rollout has its own URL).
    async with DefaultAsyncHttpxClient() as http:
        # No max_tokens here: the run's sampling settings (config.yaml) cap every call.
        model = ChatOpenAI(
            model=llm.model,
            base_url=llm.base_url,
            api_key=SecretStr(llm.api_key),
            http_async_client=http,
        )
        start = {"question": task["question"], "db_path": str(db), "schema": schema_text(db)}
        final = await build_graph(model).ainvoke({**start, "rewrites": 0})
    return execution_match(db, final["query"], task["gold_sql"], is_ordered=task["ordered"])


def train_tasks() -> list[dict[str, Any]]:
    """512 training questions on 24 databases of six domains."""
    return make_tasks("train", 512)


def test_tasks() -> list[dict[str, Any]]:
    """64 held-out questions on 8 databases of two domains never seen in training."""
    return make_tasks("test", 64)
