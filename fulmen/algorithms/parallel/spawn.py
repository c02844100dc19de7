"""Ranks 1..W-1 of a data-parallel update started on this machine by ``fulmen train`` itself.

``spawn_local_ranks`` starts each as ``python -m fulmen.algorithms.parallel.rank_main`` (a fresh
interpreter: no fork of a process holding threads, and no re-import of the caller's
``__main__`` as ``multiprocessing``'s spawn does), meets them through a file rendezvous in a
scratch directory, and returns rank 0's ``Collective``. A child exits when its parent dies,
so a killed trainer leaves no rank waiting for its collective timeout.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from fulmen.algorithms.parallel.collective import Collective, resolve_backend
from fulmen.algorithms.parallel.config import DataParallelConfig
from fulmen.errors import FulmenError
from fulmen.settings import launcher_variable

__all__ = ["spawn_local_ranks"]

logger = logging.getLogger("fulmen.train")


def spawn_local_ranks(
    config: DataParallelConfig, *, python: str | None = None
) -> tuple[Collective, list[subprocess.Popen[bytes]], Path]:
    """Start ranks ``1..world_size-1`` here (on ``python``, default this interpreter), join as 0.

    Returns rank 0's collective, the child processes and the scratch directory (the caller
    removes it when the group is closed).

    Raises:
        FulmenError: a rank exited before the group formed, or the group did not form.
    """
    backend = resolve_backend(config.backend)
    scratch = Path(tempfile.mkdtemp(prefix="fulmen-dp-"))
    init_method = f"file://{scratch / 'rendezvous'}"
    # The children import fulmen from where this process did, whatever their working dir.
    root = str(Path(__file__).resolve().parents[3])
    inherited = launcher_variable("PYTHONPATH") or ""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, inherited])}
    spawned = [
        subprocess.Popen(
            [
                python or sys.executable,
                "-m",
                "fulmen.algorithms.parallel.rank_main",
                f"--rank={rank}",
                f"--world-size={config.world_size}",
                f"--init-method={init_method}",
                f"--backend={backend}",
                f"--timeout-s={config.timeout_s}",
                f"--parent={os.getpid()}",
            ],
            env=env,
        )
        for rank in range(1, config.world_size)
    ]
    try:
        collective = _join(config, init_method, backend, spawned)
    except BaseException:
        for process in spawned:
            process.kill()
            process.wait(5)
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    logger.info("data parallel: %d update processes (%s)", config.world_size, backend)
    return collective, spawned, scratch


def _join(
    config: DataParallelConfig,
    init_method: str,
    backend: str,
    spawned: list[subprocess.Popen[bytes]],
) -> Collective:
    """Join as rank 0, failing as soon as a child dies rather than at the timeout."""
    joined: list[Collective] = []
    failure: list[BaseException] = []

    def join() -> None:
        try:
            joined.append(
                Collective(
                    rank=0,
                    world_size=config.world_size,
                    init_method=init_method,
                    backend=backend,
                    timeout_s=config.timeout_s,
                )
            )
        except BaseException as exc:  # reported in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=join, name="fulmen-dp-join", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
        dead = [p for p in spawned if p.poll() is not None]
        if dead and thread.is_alive():
            raise FulmenError(f"update rank exited with {dead[0].returncode} before joining")
    if failure:
        raise FulmenError("could not form the data-parallel group") from failure[0]
    return joined[0]
