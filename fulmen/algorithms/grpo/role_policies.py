"""``RolePolicies``: one ``GRPOUpdater`` per role's LoRA adapter over one shared peft model.

The roles and their patterns are ``roles``; see its docstring for how calls are assigned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fulmen.algorithms.grpo.roles import check_adapters, split_by_role
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.types.transitions import Transition

__all__ = ["RolePolicies"]


class RolePolicies:
    """A ``GRPOUpdater`` per adapter, all over one peft model (see the module docstring).

    Args:
        model: the base causal LM (wrapped once, then each adapter is added to it).
        config: the engines' settings (every adapter gets the same shape and optimizer).
        adapters: adapter name -> agent-name patterns, in routing order.
    """

    def __init__(self, model: Any, *, config: Any, adapters: Mapping[str, Sequence[str]]) -> None:
        check_adapters(adapters)
        self.adapters = {name: tuple(patterns) for name, patterns in adapters.items()}
        self.engines: dict[str, GRPOUpdater] = {}
        for name in self.adapters:
            engine = GRPOUpdater(model, config=config, adapter_name=name)
            model = engine.model  # the next adapter is added to this peft model
            self.engines[name] = engine

    def split(self, transitions: Sequence[Transition]) -> dict[str, list[Transition]]:
        """Return each adapter's transitions (those of no adapter are left out)."""
        return split_by_role(transitions, self.adapters)[0]

    def train_step(self, transitions: Sequence[Transition]) -> dict[str, dict[str, float]]:
        """Take one step per adapter on its own transitions; return each adapter's metrics.

        Each engine counts stale transitions against its own ``policy_version``. Transitions
        of no adapter (a call without an agent name: the base model served it) train nothing.
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
