"""What an algorithm's updater offers to take its steps on several ranks (``Updater``).

Its own module so both the ranks' plumbing (``parallel.workers``) and sharding
(``parallel.sharding``) can name it without importing each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from fulmen.algorithms.parallel.collective import Collective

__all__ = ["PolicyUpdater", "Updater"]


class Updater(Protocol):
    """What an algorithm's updater offers to be trained on several ranks.

    ``GRPOUpdater``, ``SFTUpdater``, ``PPOUpdater`` and ``DPOUpdater`` implement it; the
    plumbing here names none of them. A rank other than 0 builds the same wrapper from an
    ``UpdaterSpec`` (its class, its config model and what the stage starts from), takes rank
    0's ``trained`` weights and optimizer state, and runs ``train_part`` on its share of each
    step.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    step: int
    collective: Collective | None
    #: A sharded checkpoint ``load_checkpoint`` found, loaded once the ranks shard the policy
    #: (``parallel.sharding``); ``None`` otherwise.
    resume_shards: Path | None

    @property
    def config(self) -> Any:
        """The wrapper's settings: a pydantic model with ``dtype`` and ``finetune``."""
        ...

    @property
    def trained(self) -> nn.Module:
        """What the optimizer trains, checkpoints hold and the ranks copy.

        ``model``, or ``model`` and the algorithm's own modules (PPO's value head) under one
        ``nn.ModuleDict``.
        """
        ...

    @property
    def frozen(self) -> tuple[nn.Module, ...]:
        """Whole models the update runs forward only (a full fine-tune's KL reference copy).

        Sharded like the policy, so no rank holds a whole copy.
        """
        ...

    def new_optimizer(self) -> torch.optim.Optimizer:
        """Build a new optimizer over ``trained``'s parameters as they are now.

        Sharding builds one over the shards.
        """
        ...

    def train_part(self, part: Any) -> None:
        """Train on this rank's share of a step, the way rank 0 trains on its own share."""
        ...


class PolicyUpdater:
    """What an updater whose optimizer trains its policy alone answers ``Updater`` with.

    ``trained`` is the policy, nothing is frozen, and a new optimizer is built over the
    policy's trainable weights with the updater's settings. An updater with more (PPO's value
    head, a full fine-tune's KL reference copy) overrides what differs.
    """

    model: nn.Module
    config: Any

    @property
    def trained(self) -> nn.Module:
        """What the optimizer trains and a checkpoint holds: the policy."""
        return self.model

    @property
    def frozen(self) -> tuple[nn.Module, ...]:
        """No whole model the update runs forward only."""
        return ()

    def new_optimizer(self) -> torch.optim.Optimizer:
        """Build a new optimizer over the policy's trainable weights as they are now."""
        from fulmen.algorithms.optimizer import build_optimizer

        return build_optimizer(self.model, self.config)
