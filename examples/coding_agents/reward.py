"""The coding agents' reward: the file the task asked for, and the reply.

``score`` gives 0.5 when ``answer.txt`` holds the task's word, up to 0.4 for how close the
agent's final reply is to the word (``difflib``'s ratio of the two, lower-cased), and 0.1 when
the agent ended by itself (exit status 0: it finished its turn, rather than failing on an answer
cut at ``max_tokens`` or running out of steps). The last two let a model that cannot yet use
the agent's tools still earn a graded reward, so a GRPO group of a small model's rollouts
differs and makes an update.

The final reply is where each recipe leaves it: ``last.txt`` in the working directory (the
Codex CLI's ``-o last.txt``); mini-swe-agent's submission, else its last assistant message, in
``trajectory.json`` (its ``--output``); on stdout, the text of the last ``assistant`` event
(Claude Code's ``--output-format stream-json``) or the ``result`` of the last JSON object that
is not an error (``claude_sdk_agent.py``); else the last non-JSON line of stdout (OpenCode, the
AI SDK agent). An error result (Claude Code's, after an answer cut at ``max_tokens`` four
times) is no reply: the text the model wrote before it is.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from fulmen.agent.command import CommandResult


def final_reply(result: CommandResult) -> str:
    """The agent's final reply, from the place its recipe leaves it (see the module)."""
    last = result.workdir / "last.txt"
    if last.is_file():
        return last.read_text(encoding="utf-8", errors="replace")
    trajectory = result.workdir / "trajectory.json"
    if trajectory.is_file():
        return _trajectory_reply(trajectory)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    for line in reversed(lines):
        shown = _json_object(line)
        if shown is None:
            continue
        message = shown.get("message") or {}
        # Claude Code's stream-json: the model's own text (its error notes are "<synthetic>").
        if shown.get("type") == "assistant" and message.get("model") != "<synthetic>":
            content = message.get("content") or []
            return "".join(
                block.get("text", "")
                for block in content
                if isinstance(block, dict) and block.get("type") == "text"
            )
        if isinstance(shown.get("result"), str) and not shown.get("is_error"):
            return shown["result"]
    plain = [line for line in lines if _json_object(line) is None]
    return plain[-1] if plain else ""


def _json_object(line: str) -> dict[str, Any] | None:
    """``line`` as a JSON object, or ``None``."""
    if not line.startswith("{"):
        return None
    try:
        shown = json.loads(line)
    except ValueError:
        return None
    return shown if isinstance(shown, dict) else None


def _trajectory_reply(path: Path) -> str:
    """mini-swe-agent's submission, else the model's last reply in its trajectory.

    A reply without a valid tool call is not kept as an ``assistant`` message: mini-swe-agent
    answers it with a format-error message that holds the model's raw response
    (``extra.response``), which is read then.
    """
    try:
        saved = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return ""
    if not isinstance(saved, dict):
        return ""
    submission = (saved.get("info") or {}).get("submission")
    if isinstance(submission, str) and submission.strip():
        return submission
    for message in reversed(saved.get("messages") or []):
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else ""
        response = (message.get("extra") or {}).get("response")
        if isinstance(response, dict) and response.get("choices"):
            content = ((response["choices"][0] or {}).get("message") or {}).get("content")
            return content if isinstance(content, str) else ""
    return ""


def score(result: CommandResult) -> dict[str, float]:
    """``reward`` (the sum), ``file`` (0 or 0.5), ``reply`` (0 to 0.4), ``finished`` (0 or 0.1)."""
    word = str(result.task["expect"]).lower()
    path = result.workdir / str(result.task["file"])
    written = path.is_file() and path.read_text(encoding="utf-8", errors="replace").strip().lower()
    file_part = 0.5 if written == word else 0.0
    reply = final_reply(result).strip().lower()[:200]
    reply_part = 0.4 * difflib.SequenceMatcher(None, reply, word).ratio()
    finished = 0.1 if result.exit_code == 0 else 0.0
    return {
        "reward": file_part + reply_part + finished,
        "file": file_part,
        "reply": reply_part,
        "finished": finished,
    }
