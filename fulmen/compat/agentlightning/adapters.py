"""0.x's trace adapters as what they configured in fulmen.

0.x turned spans into training data with an adapter object; fulmen builds transitions from the
gateway's call records (``fulmen.adapter``), configured by ``algorithm.transitions``. The
adapters 0.x training scripts pass to ``Trainer(adapter=...)`` are accepted for what they
select: ``TracerTraceToTriplet(agent_match=...)`` and ``LlmProxyTraceToTriplet`` the calls to
train on, ``TraceToMessages`` the conversations APO's critic reads (fulmen's ``apo`` reads
the gateway's records). Calling ``adapt`` on them is refused: read the store instead
(``LightningStore.query_spans``, ``fulmen.adapter.load_trajectory``).
"""

from __future__ import annotations

from typing import Any

from fulmen.compat.agentlightning.agent_match import agent_patterns
from fulmen.compat.agentlightning.errors import NotSupported

__all__ = ["LlmProxyTraceToTriplet", "TraceAdapter", "TraceToMessages", "TracerTraceToTriplet"]


class TraceAdapter:
    """Base of the adapters ``agl.Trainer`` accepts; ``agents()`` is what it selects."""

    def agents(self) -> tuple[str, ...] | None:
        """Return the fnmatch patterns of the agents whose calls train (``None``: every call)."""
        return None

    def adapt(self, source: Any) -> Any:
        """Refused: fulmen builds training data from the gateway's records."""
        raise NotSupported(
            f"{type(self).__name__}.adapt",
            why="fulmen builds transitions from the gateway's call records, not from spans",
            instead="fulmen.adapter.load_trajectory(store, rollout_id) or "
            "LightningStore.query_spans",
        )


class TracerTraceToTriplet(TraceAdapter):
    """Selects the calls to train by agent name (``agent_match``, a regular expression)."""

    def __init__(self, *, agent_match: str | None = None, **options: Any) -> None:
        if options:
            raise NotSupported(
                f"TracerTraceToTriplet({', '.join(sorted(options))})",
                why="fulmen's transitions are configured by algorithm.transitions",
                instead="set merge / credit / missing_reward under algorithm.transitions",
            )
        self.agent_match = agent_match

    def agents(self) -> tuple[str, ...] | None:
        """Return the agent patterns ``agent_match`` translates to."""
        return agent_patterns(self.agent_match) if self.agent_match is not None else None


class LlmProxyTraceToTriplet(TraceAdapter):
    """Every call the proxy recorded trains: fulmen's default."""


class TraceToMessages(TraceAdapter):
    """Return the conversations APO critiques: fulmen's ``apo`` reads the gateway's records."""
