"""``algorithm.data_parallel``: run the weight update (GRPO, SFT) on several processes.

The settings, and whether this process is one of ``torchrun``'s ranks. Importing this module is
light; ``parallel.group.data_parallel`` is the context the training loops run their steps in,
the process group is ``parallel.collective`` and the worker processes ``parallel.workers``.
``docs/data-parallel.md`` explains the design: the step's samples are split by rollout over
the ranks, the loss weights are computed once over the whole batch, gradients are summed, and
every rank takes the same optimizer step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from fulmen.settings import launcher_variable

if TYPE_CHECKING:
    pass

__all__ = ["DataParallelConfig", "torchrun_rank"]


def torchrun_rank() -> tuple[int, int] | None:
    """``(RANK, WORLD_SIZE)`` when this process is one of several started by ``torchrun``.

    These are torch's launcher conventions (``torch.distributed``'s ``env://`` reads them
    too), not fulmen settings (``fulmen.settings.launcher_variable``).
    """
    world = int(launcher_variable("WORLD_SIZE") or "1")
    rank = launcher_variable("RANK")
    if world < 2 or rank is None:
        return None
    return int(rank), world


class DataParallelConfig(BaseModel):
    """How many processes take each update, and how they talk.

    Attributes:
        world_size: processes taking the update, this one included (>= 2: one process is the
            default, without this section). ``fulmen train`` starts the other ``world_size - 1``
            on this machine itself; under ``torchrun`` they are the other ranks, and this must
            equal ``torchrun``'s ``WORLD_SIZE`` (or be left out).
        backend: ``gloo`` (CPU) or ``nccl`` (CUDA GPUs, one per rank); ``None``: ``nccl`` when
            CUDA is available, else ``gloo``.
        timeout_s: how long a rank waits for the others in one collective before failing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    world_size: int = Field(ge=2)
    backend: Literal["gloo", "nccl"] | None = None
    timeout_s: float = Field(default=600.0, gt=0)
