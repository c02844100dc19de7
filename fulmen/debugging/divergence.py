"""Comparing a replayed model request with the recorded one, and saying how they differ.

Requests are compared as the engine receives them: the agent's body after the gateway applied
the rollout's sampling settings and asked for token ids (``fulmen.gateway.capture.
prepare_request``), so a field the rollout's settings override (say the agent's own
``temperature`` under ``val_sampling``) is no divergence: the model was asked the same thing.
The difference is shown as the fields that differ and a unified diff of both bodies as
indented JSON.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Divergence", "describe_divergence", "differing_fields"]

_MAX_DIFF_LINES = 60


@dataclass(frozen=True)
class Divergence:
    """A replayed request that matched no recorded call still to be served.

    Attributes:
        call_number: which request of the replay it was (1-based, in arrival order).
        recorded_number: the recorded call it was compared with (1-based, in store order), or
            ``None`` when the agent made more calls than the rollout recorded.
        fields: the top-level request fields that differ (``messages``, ``tools``, ...).
        diff: a unified diff, recorded (``-``) against replayed (``+``), as indented JSON.
        served: whether the recorded reply was served anyway (``--on-divergence serve``).
    """

    call_number: int
    recorded_number: int | None
    fields: tuple[str, ...]
    diff: str
    served: bool

    def summary(self) -> str:
        """Return one line naming the call and the fields that differ."""
        if self.recorded_number is None:
            return f"call #{self.call_number}: the recording has no call left to answer it"
        return (
            f"call #{self.call_number} differs from recorded call #{self.recorded_number} "
            f"in {', '.join(self.fields) or 'nothing comparable'}"
        )


def differing_fields(recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> tuple[str, ...]:
    """Return the top-level fields whose values differ, ``messages`` and ``tools`` first."""
    names = sorted(set(recorded) | set(replayed))
    differ = [n for n in names if recorded.get(n) != replayed.get(n)]
    first = [n for n in ("messages", "prompt", "input", "tools") if n in differ]
    return (*first, *(n for n in differ if n not in first))


def describe_divergence(recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> str:
    """Return a unified diff of two request bodies as sorted, indented JSON (at most 60 lines)."""
    before = json.dumps(recorded, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    after = json.dumps(replayed, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    lines = list(difflib.unified_diff(before, after, "recorded", "replayed", n=2, lineterm=""))
    if len(lines) > _MAX_DIFF_LINES:
        hidden = len(lines) - _MAX_DIFF_LINES
        lines = [*lines[:_MAX_DIFF_LINES], f"... ({hidden} more diff lines)"]
    return "\n".join(lines)
