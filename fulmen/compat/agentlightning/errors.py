"""The error the compatibility layer raises where fulmen cannot honour a 0.x name or value.

``NotSupported`` is a ``ConfigError``: it says which 0.x name or value was refused, why, and
what to write instead, so nothing in the layer differs from 0.x silently.
"""

from __future__ import annotations

from fulmen.errors import ConfigError

__all__ = ["GUIDE", "NotSupported"]

GUIDE = "docs/migrate-from-agent-lightning.md"


class NotSupported(ConfigError):
    """Return a 0.x name or value fulmen refuses, with what to change.

    Args:
        what: the 0.x name or value (``"LitAgent.on_rollout_start"``, ``"engine='jinja'"``).
        why: why fulmen cannot honour it.
        instead: what to write instead.
    """

    code = "agl_not_supported"

    def __init__(self, what: str, *, why: str, instead: str) -> None:
        super().__init__(
            f"agentlightning compat: {what} is not supported: {why}. Instead: {instead} "
            f"(see {GUIDE})",
            detail={"name": what, "why": why, "instead": instead},
        )
