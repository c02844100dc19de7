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

__all__ = ["Updater"]


class Updater(Protocol):
    """What an algorithm's updater offers to be trained on several ranks.

    ``GRPOUpdater`` and ``SFTUpdater`` implement it; the plumbing here names neither. A rank
    other than 0 builds the same wrapper from an ``UpdaterSpec`` (its class, its config model
    and what the stage starts from) and runs ``train_part`` on its share of each step.
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

    def train_part(self, part: Any) -> None:
        """Train on this rank's share of a step, the way rank 0 trains on its own share."""
        ...
