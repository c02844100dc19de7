"""Warnings for agent selection that cannot work: unnamed calls, and steps that select nothing.

With ``transitions.agents`` set to names, a call no agent name reached counts as the empty name
and is skipped; a step whose calls all miss the patterns trains on nothing. Both used to pass
in silence. ``AttributionCheck`` reads each step's transition diagnostics and says so: unnamed
calls once per run (with the fix), an empty selection at every step it happens.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.types.transitions import TransitionDiagnostics

if TYPE_CHECKING:
    from fulmen.transitions.trajectory import TransitionOptions

__all__ = ["AttributionCheck"]

_log = logging.getLogger("fulmen.transitions")


class AttributionCheck:
    """Checks each step's diagnostics against a run's agent selection; one per run.

    Args:
        options: the run's transition options (their ``agents`` patterns).
        logger: where the warnings go (default ``fulmen.transitions``).
    """

    def __init__(self, options: TransitionOptions, *, logger: logging.Logger | None = None) -> None:
        self._patterns = list(options.agents)
        # "*" matches every name, the empty one included: nothing can be left out.
        self._is_selective = "*" not in options.agents
        self._log = logger or _log
        self._has_warned_unnamed = False

    def check(self, step: int, diagnostics: Sequence[TransitionDiagnostics]) -> list[str]:
        """Log and return the warnings for the diagnostics of one step's attempts."""
        if not self._is_selective:
            return []
        total = sum(diagnostics, TransitionDiagnostics())
        warnings: list[str] = []
        if total.calls_unnamed and not self._has_warned_unnamed:
            self._has_warned_unnamed = True
            token_level = total.calls_used + total.skipped_agent + total.skipped_empty
            warnings.append(
                f"{total.calls_unnamed} of {token_level} token-level LLM calls in step {step} "
                f"carry no agent name, so the agent selection {self._patterns} cannot select them. "
                'Run the agent\'s code inside fulmen.as_agent("name") (any framework, no '
                "extra package; LangGraph node names are read without it); a call made from a "
                "thread that did not inherit the rollout's context stays unnamed. "
                "(Shown once per run.)"
            )
        if total.calls_used == 0 and total.skipped_agent:
            warnings.append(
                f"agent selection {self._patterns} matched no call in step {step}: "
                f"{total.skipped_agent} token-level calls were skipped by name "
                f"({total.calls_unnamed} unnamed); this step has nothing to train on"
            )
        for warning in warnings:
            self._log.warning(warning)
        return warnings
