"""``data_parallel``: the context an algorithm's loop runs its steps in, over every rank.

Importing this module is light: the process group and the workers (torch) are imported only
when a group is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.algorithms.parallel.config import (
    DataParallelConfig,
    check_sharded_resume,
    torchrun_rank,
)

if TYPE_CHECKING:
    from fulmen.algorithms.parallel.workers import UpdateWorkers

__all__ = ["data_parallel"]


@contextlib.asynccontextmanager
async def data_parallel(
    engine: Any,
    config: DataParallelConfig | None,
    *,
    model_path: Path,
    weights: Path | None = None,
    adapter: Path | None = None,
    python: str | None = None,
) -> AsyncIterator[UpdateWorkers | None]:
    """Run the body with ``engine``'s updates spread over the data-parallel ranks.

    ``engine`` is an ``Updater`` (``parallel.updater``): any algorithm's optimizer
    wrapper that can be rebuilt from its class and config and trains a share of a step. With
    ``config.strategy`` ``fsdp`` every rank holds a shard of it (``parallel.sharding``).

    Yields ``None`` (and does nothing) without ``config`` outside ``torchrun``. Otherwise the
    other ranks (spawned now, or ``torchrun``'s) build the same engine from ``model_path``,
    ``weights`` and ``adapter`` (what the stage starts from), take ``engine``'s current state,
    and share each of its steps; on exit they are released (``torchrun``) or stopped, and
    killed if the body failed. Spawned ranks run on ``python`` (``$FULMEN_PYTHON``; ``None``:
    this interpreter).
    """
    if config is None and torchrun_rank() is None:
        check_sharded_resume(engine.resume_shards, config)
        yield None
        return
    from fulmen.algorithms.parallel.workers import UpdaterSpec, open_update_workers

    spec = UpdaterSpec.of(engine, model_path, weights=weights, adapter=adapter)
    workers = await asyncio.to_thread(open_update_workers, config, python=python)
    if workers is None:
        yield None
        return
    try:
        await asyncio.to_thread(workers.attach, engine, spec, config=config)
        yield workers
    except BaseException:
        workers.close(failed=True)  # the others may be stuck in a collective: kill, not ask
        raise
    await asyncio.to_thread(workers.close)
