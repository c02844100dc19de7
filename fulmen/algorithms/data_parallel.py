"""``algorithm.data_parallel``: run the weight update (GRPO, SFT) on several processes.

The settings, and ``data_parallel``, the context the training loops run their steps in.
Importing this module is light; the process group is ``fulmen.algorithms.distributed`` and the
worker processes ``fulmen.algorithms.update_workers``, imported when a group is opened.
``docs/data-parallel.md`` explains the design: the step's samples are split by rollout over
the ranks, the loss weights are computed once over the whole batch, gradients are summed, and
every rank takes the same optimizer step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fulmen.settings import launcher_variable

if TYPE_CHECKING:
    from fulmen.algorithms.update_workers import UpdateWorkers

__all__ = ["DataParallelConfig", "data_parallel", "torchrun_rank"]


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


@contextlib.asynccontextmanager
async def data_parallel(
    engine: Any,
    config: DataParallelConfig | None,
    *,
    kind: Literal["grpo", "sft"],
    model_path: Path,
    weights: Path | None = None,
    adapter: Path | None = None,
) -> AsyncIterator[UpdateWorkers | None]:
    """Run the body with ``engine``'s updates spread over the data-parallel ranks.

    Yields ``None`` (and does nothing) without ``config`` outside ``torchrun``. Otherwise the
    other ranks (spawned now, or ``torchrun``'s) build the same engine from ``model_path``,
    ``weights`` and ``adapter`` (what the stage starts from), take ``engine``'s current state,
    and share each of its steps; on exit they are released (``torchrun``) or stopped, and
    killed if the body failed.
    """
    if config is None and torchrun_rank() is None:
        yield None
        return
    from fulmen.algorithms.update_workers import EngineSpec, open_update_workers

    spec = EngineSpec(
        kind,
        str(model_path),
        engine.config.model_dump(mode="json"),
        weights=str(weights) if weights else None,
        adapter=str(adapter) if adapter else None,
    )
    workers = await asyncio.to_thread(open_update_workers, config)
    if workers is None:
        yield None
        return
    try:
        await asyncio.to_thread(workers.attach, engine, spec)
        yield workers
    except BaseException:
        workers.close(failed=True)  # the others may be stuck in a collective: kill, not ask
        raise
    await asyncio.to_thread(workers.close)
