"""Roles: which adapter a call belongs to when each role trains its own LoRA adapter.

``algorithm.adapters`` maps an adapter name to the agent names (``fnmatch`` patterns) whose
calls it serves and learns from, e.g. ``{writer: [write_query], rewriter: [rewrite_query]}``.
``role_policies.RolePolicies`` keeps one ``GRPOUpdater`` per adapter over one shared peft
model: the base weights are in memory once, each adapter has its own optimizer state, and each
engine makes its adapter the active one before it computes, so a step of one role leaves the
other adapters bit-identical. A transition belongs to the first adapter whose patterns match
its agent (``role_of``), the same order the gateway routes calls in
(``LLMResource.agent_models``), and each role's group-relative advantages are computed over
that role's transitions alone. A call that carried no agent name was served by the base model
(the gateway routes only named calls), so it belongs to no adapter, even under a catch-all
pattern such as ``"*"``: training it into one would take the base model's logprobs for that
adapter's behaviour policy. A pattern named by two adapters is refused: the gateway's routes
would send its calls to the later one while training gives them to the first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fulmen.types.transitions import Transition

__all__ = ["ADAPTER_NAME", "check_adapters", "role_of", "split_by_role"]

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
    owner: dict[str, str] = {}
    for name, patterns in adapters.items():
        for pattern in patterns:
            first = owner.setdefault(pattern, name)
            if first != name:
                raise ValueError(
                    f"algorithm.adapters: {pattern!r} is named by both {first!r} and {name!r}; "
                    "the gateway would route its calls to one adapter and train them into the "
                    "other: name each pattern once"
                )


def role_of(agent_name: str | None, adapters: Mapping[str, Sequence[str]]) -> str | None:
    """Return the adapter whose patterns first match ``agent_name`` (``None``: no adapter).

    A call without an agent name (``None``) belongs to no adapter, as the gateway routes it
    (``LLMResource.model_for``): it was served by the base model.
    """
    if agent_name is None:
        return None
    for adapter, patterns in adapters.items():
        if any(fnmatchcase(agent_name, pattern) for pattern in patterns):
            return adapter
    return None


def split_by_role(
    transitions: Sequence[Transition], adapters: Mapping[str, Sequence[str]]
) -> tuple[dict[str, list[Transition]], int]:
    """Return each adapter's transitions, and how many belong to no adapter (left out)."""
    out: dict[str, list[Transition]] = {name: [] for name in adapters}
    unrouted = 0
    for transition in transitions:
        role = role_of(transition.agent_name, adapters)
        if role is None:
            unrouted += 1
        else:
            out[role].append(transition)
    return out, unrouted
