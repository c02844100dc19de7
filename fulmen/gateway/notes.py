"""The gateway's once-only warnings about what it changed in agents' calls.

An agent keeps its own sampling values and tools in its code; where the gateway sends
something else (a run's sampling settings, a behaviour mode's neutral values, tools a
token-level engine cannot serve), the user is told once, not on every call.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from fulmen.gateway.context import CallContext

__all__ = ["CallNotes"]

# The proxy's logger: these are its warnings (log filters written for them keep working).
_log = logging.getLogger("fulmen.gateway.proxy")

# Rollouts whose forced sampling fields were logged (once each), remembered at most.
_NOTED_ROLLOUTS = 4096


class CallNotes:
    """What the gateway already said, so each change to agents' calls is logged once.

    One per gateway: tool types dropped from translated calls, (mode, field) pairs a run's
    sampling settings replaced, and the recent rollouts whose fields a behaviour mode forced.
    """

    def __init__(self) -> None:
        self._forced: OrderedDict[str, None] = OrderedDict()
        self._dropped_tools: set[str] = set()
        self._replaced: set[tuple[str, str]] = set()

    def dropped_tools(self, kinds: Sequence[str]) -> None:
        """Log, once per tool type, that tools of ``kinds`` were not given to the engine."""
        new = sorted(set(kinds) - self._dropped_tools)
        if new:
            self._dropped_tools.update(new)
            _log.warning(
                "tools of type %s dropped from translated calls: a token-level engine serves "
                "function tools only (docs/capture.md)",
                ", ".join(new),
            )

    def replaced(self, ctx: CallContext, body: dict[str, Any], overrides: dict[str, Any]) -> None:
        """Log, once per mode and field, an agent's sampling field the rollout's settings replaced.

        Say ``max_tokens: 500`` sent as 8: agents keep their own values in their code, and a
        run's sampling settings win over them without a word otherwise.
        """
        for name, value in overrides.items():
            if name == "model" or name not in body or body[name] == value:
                continue
            if (ctx.mode, name) in self._replaced:
                continue
            self._replaced.add((ctx.mode, name))
            _log.warning(
                "rollout %s (%s): the agent's %s=%r was sent as %r: the run's sampling "
                "settings for %s rollouts replace an agent's own (rollouts.%s_sampling)",
                ctx.rollout_id,
                ctx.mode,
                name,
                body[name],
                value,
                ctx.mode,
                ctx.mode,
            )

    def forced(self, rollout_id: str, fields: Sequence[str]) -> None:
        """Log, once per rollout, the agent's sampling ``fields`` a behaviour mode replaced."""
        if rollout_id in self._forced:
            return
        self._forced[rollout_id] = None
        if len(self._forced) > _NOTED_ROLLOUTS:
            self._forced.popitem(last=False)
        _log.warning(
            "rollout %s: the agent's %s sent at neutral values instead: its calls sample the "
            "behaviour policy the trainer corrects for (docs/behaviour-policy.md)",
            rollout_id,
            ", ".join(fields),
        )
