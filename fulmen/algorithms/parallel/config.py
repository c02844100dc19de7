"""``algorithm.data_parallel``: run the weight update (GRPO, SFT) on several processes.

The settings, and whether this process is one of ``torchrun``'s ranks. Importing this module is
light; ``parallel.group.data_parallel`` is the context the training loops run their steps in,
the process group is ``parallel.collective`` and the worker processes ``parallel.workers``.
``docs/data-parallel.md`` explains the design: the step's samples are split by rollout over
the ranks, the loss weights are computed once over the whole batch, gradients are summed, and
every rank takes the same optimizer step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fulmen.errors import ConfigError
from fulmen.settings import launcher_variable

__all__ = ["DataParallelConfig", "check_sharded_resume", "torchrun_rank"]


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
        strategy: ``replicate`` (each rank holds the whole policy and its optimizer state; the
            gradients are summed in one all-reduce) or ``fsdp`` (PyTorch's FSDP2: each rank
            holds 1/``world_size`` of the weights, gradients and optimizer state, gathering one
            decoder layer at a time; ``docs/data-parallel.md``).
        param_dtype: with ``fsdp``, the dtype the gathered weights compute in (mixed
            precision: the shards stay in the policy's ``dtype``, gradients are reduced in
            float32); ``None``: the policy's ``dtype``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    world_size: int = Field(ge=2)
    backend: Literal["gloo", "nccl"] | None = None
    timeout_s: float = Field(default=600.0, gt=0)
    strategy: Literal["replicate", "fsdp"] = "replicate"
    param_dtype: Literal["float32", "bfloat16", "float16"] | None = None

    @model_validator(mode="after")
    def _param_dtype_needs_fsdp(self) -> DataParallelConfig:
        if self.param_dtype is not None and self.strategy != "fsdp":
            raise ValueError("param_dtype applies to strategy 'fsdp' only")
        return self


def check_sharded_resume(resume: Path | None, config: DataParallelConfig | None) -> None:
    """Refuse to resume a sharded checkpoint (``resume``, its shards) without ``fsdp``.

    Raises:
        ConfigError: ``resume`` is set and ``config`` does not shard.
    """
    if resume is not None and (config is None or config.strategy != "fsdp"):
        raise ConfigError(
            f"the checkpoint {resume.parent} holds sharded state (written with "
            "algorithm.data_parallel.strategy 'fsdp'); resume it with that strategy"
        )
