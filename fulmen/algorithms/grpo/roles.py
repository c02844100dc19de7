"""Roles: which adapter a call belongs to when each role trains its own LoRA adapter.

``algorithm.adapters`` maps an adapter name to the agent names (``fnmatch`` patterns) whose
calls it serves and learns from, e.g. ``{writer: [write_query], rewriter: [rewrite_query]}``.
``role_policies.RolePolicies`` keeps one ``GRPOUpdater`` per adapter over one shared peft
model: the base weights are in memory once, each adapter has its own optimizer state, and each
engine makes its adapter the active one before it computes, so a step of one role leaves the
other adapters bit-identical. A transition belongs to the first adapter whose patterns match
its agent (``role_of``), the same order the gateway routes calls in
(``LLMResource.agent_models``), and each role's group-relative advantages are computed over
that role's transitions alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

__all__ = ["ADAPTER_NAME", "check_adapters", "role_of"]

#: What an adapter name may be: it becomes a directory name and part of a served model name.
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_adapters(adapters: Mapping[str, Sequence[str]]) -> None:
    """Raise ``ValueError`` unless ``adapters`` maps valid names to non-empty pattern lists."""
    if not adapters:
        raise ValueError("algorithm.adapters is empty: name at least one adapter")
    for name, patterns in adapters.items():
        if not ADAPTER_NAME.match(name) or name == "default":
            raise ValueError(
                f"algorithm.adapters: {name!r} is not an adapter name (letters, digits, "
                "'_', '.', '-', at most 64, not 'default')"
            )
        if not patterns or any(not p or "\x00" in p for p in patterns):
            raise ValueError(f"algorithm.adapters.{name}: give one or more agent names")


def role_of(agent_name: str | None, adapters: Mapping[str, Sequence[str]]) -> str | None:
    """Return the adapter whose patterns first match ``agent_name`` (``None``: no adapter)."""
    name = agent_name or ""
    for adapter, patterns in adapters.items():
        if any(fnmatchcase(name, pattern) for pattern in patterns):
            return adapter
    return None
