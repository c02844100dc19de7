"""One LoRA adapter per role on one base model: each role's calls train only its own adapter.

``algorithm.adapters`` maps an adapter name to the agent names (``fnmatch`` patterns) whose
calls it serves and learns from, e.g. ``{writer: [write_query], rewriter: [rewrite_query]}``.
``RolePolicies`` keeps one ``GRPOEngine`` per adapter over one shared peft model: the base
weights are in memory once, each adapter has its own optimizer state, and each engine makes its
adapter the active one before it computes, so a step of one role leaves the other adapters
bit-identical. A transition belongs to the first adapter whose patterns match its agent
(``role_of``), the same order the gateway routes calls in (``LLMResource.agent_models``), and
each role's group-relative advantages are computed over that role's transitions alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from fulmen.types.transitions import Transition

__all__ = ["ADAPTER_NAME", "RolePolicies", "check_adapters", "role_of"]

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


class RolePolicies:
    """A ``GRPOEngine`` per adapter, all over one peft model (see the module docstring).

    Args:
        model: the base causal LM (wrapped once, then each adapter is added to it).
        config: the engines' settings (every adapter gets the same shape and optimizer).
        adapters: adapter name -> agent-name patterns, in routing order.
    """

    def __init__(self, model: Any, *, config: Any, adapters: Mapping[str, Sequence[str]]) -> None:
        from fulmen.algorithms.grpo.engine import GRPOEngine

        check_adapters(adapters)
        self.adapters = {name: tuple(patterns) for name, patterns in adapters.items()}
        self.engines: dict[str, GRPOEngine] = {}
        for name in self.adapters:
            engine = GRPOEngine(model, config=config, adapter_name=name)
            model = engine.model  # the next adapter is added to this peft model
            self.engines[name] = engine

    def split(self, transitions: Sequence[Transition]) -> dict[str, list[Transition]]:
        """Return each adapter's transitions (those of no adapter are left out)."""
        out: dict[str, list[Transition]] = {name: [] for name in self.adapters}
        for transition in transitions:
            role = role_of(transition.agent_name, self.adapters)
            if role is not None:
                out[role].append(transition)
        return out

    def train_step(self, transitions: Sequence[Transition]) -> dict[str, dict[str, float]]:
        """Take one step per adapter on its own transitions; return each adapter's metrics.

        Each engine counts stale transitions against its own ``policy_version``.
        """
        return {
            name: self.engines[name].train_step(part)
            for name, part in self.split(transitions).items()
        }

    def save_checkpoint(self, directory: Path) -> None:
        """Write each adapter's checkpoint to ``directory/NAME``."""
        for name, engine in self.engines.items():
            engine.save_checkpoint(directory / name)

    def load_checkpoint(self, directory: Path) -> None:
        """Restore what ``save_checkpoint`` wrote."""
        for name, engine in self.engines.items():
            engine.load_checkpoint(directory / name)

    @property
    def is_full(self) -> bool:
        """Always ``False``: per-role policies are LoRA adapters."""
        return False

    @property
    def step(self) -> int:
        """Steps taken (every adapter steps together)."""
        return max(engine.step for engine in self.engines.values())
