"""Checks of a run's configuration that must pass before anything is started.

A wrong ``agent:`` used to surface only when the runner imported it, after the engine and the
gateway had started (seconds to minutes); ``check_before_start`` imports it first, and the
error says what to change (most often ``python_path``). A command agent's files that its
rollouts' users could not read fail here too, not in every rollout.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fulmen.errors import ConfigError

__all__ = ["PYTHON_PATH_HINT", "check_agent", "check_before_start", "check_python_path"]

PYTHON_PATH_HINT = (
    "if the module is a file next to your config, add `python_path: [.]` to the config "
    "(python_path entries are relative to the config file)"
)


def check_python_path(python_path: Sequence[Path]) -> None:
    """Raise ``ConfigError`` for a ``python_path`` entry that is not a directory."""
    for entry in python_path:
        if not Path(entry).is_dir():
            raise ConfigError(
                f"python_path entry {entry} is not a directory (python_path entries are "
                "relative to the config file)"
            )


def check_agent(agent: Any, python_path: Sequence[Path]) -> None:
    """Import ``agent`` when it is a ``"module:object"`` string; ``ConfigError`` with a hint.

    An agent given as a mapping runs its kind's own checks (``AgentKind.preflight``: a
    command agent's rollouts' own users must reach what they need, and nothing it needs may
    be hidden by its sandbox).
    """
    from fulmen.agent.api import load_target
    from fulmen.agent.kinds import kind_of
    from fulmen.agent.spec import AgentSpec

    if isinstance(agent, AgentSpec):
        kind_of(agent).preflight(agent)
    if not isinstance(agent, str):
        return
    try:
        load_target(agent)
    except ConfigError as exc:
        cause = exc.__cause__
        module = agent.split(":", 1)[0]
        if isinstance(cause, ModuleNotFoundError) and cause.name == module:
            hint = _module_hint(module, python_path)
        elif isinstance(cause, ModuleNotFoundError):
            hint = (
                f"the agent's module imports {cause.name!r}, which is not installed in this "
                f"environment ({sys.executable}): install it there"
            )
        elif isinstance(cause, AttributeError):
            hint = "check the name after ':' (a @fulmen.rollout function or a fulmen.Agent)"
        else:
            hint = "fix the agent's module at the line named"
        raise ConfigError(f"agent: {exc.message}; {hint}") from exc


def _module_hint(module: str, python_path: Sequence[Path]) -> str:
    """Say what to change when the agent's module itself is not found."""
    if not python_path:
        return f"{PYTHON_PATH_HINT}; python_path now: none"
    where = ", ".join(str(p) for p in python_path)
    top = module.split(".", 1)[0]
    found = sorted(
        {p.stem for entry in python_path for p in Path(entry).glob("*.py")}
        | {p.name for entry in python_path for p in Path(entry).iterdir() if p.is_dir()}
    )
    close = difflib.get_close_matches(top, found, n=1, cutoff=0.6)
    suggestion = f"; did you mean {close[0]!r}?" if close else ""
    return f"no module {top!r} in python_path ({where}){suggestion}"


def check_before_start(agent: Any, python_path: Sequence[Path]) -> None:
    """Check ``python_path`` and import the agent; both raise ``ConfigError`` with a hint."""
    check_python_path(python_path)
    check_agent(agent, python_path)
