"""The calc reward for the JavaScript agent: 1.0 for the exact answer, else 0.0.

``agent.mjs`` prints the model's final turn (``ANSWER: n``); this parses it with the Python
agent's own ``parse_answer`` (``examples/calc/agent.py``, on ``python_path``), so both agents
are scored alike.
"""

from __future__ import annotations

from agent import parse_answer

from fulmen.agent.command import CommandResult

__all__ = ["exact_answer"]


def exact_answer(result: CommandResult) -> float:
    """1.0 when the number after ``ANSWER:`` in the agent's output is the task's answer."""
    answer = parse_answer(result.stdout)
    return 1.0 if answer is not None and abs(answer - result.task["answer"]) < 1e-6 else 0.0
