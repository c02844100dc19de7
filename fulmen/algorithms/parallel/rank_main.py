"""One rank (1..W-1) of a data-parallel update that ``spawn_local_ranks`` started on this machine.

It takes rank 0's updates (``workers.run_update_worker``) and exits when its parent dies, so a
killed trainer leaves no rank waiting for its collective timeout.
"""

from __future__ import annotations

import argparse
import os
import select
import threading
import time

from fulmen.algorithms.parallel.workers import run_update_worker

__all__ = ["main"]


def _exit_with_parent(parent: int) -> None:
    """End this process once the trainer ``parent`` has ended.

    The trainer need not be this process's parent: with ``$FULMEN_PYTHON`` a wrapper may start
    the rank for it. Where the platform has no process descriptors, the parent is checked every
    second instead.
    """
    try:
        handle = os.pidfd_open(parent)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd here: watch for re-parenting
        handle = None

    def watch() -> None:
        if handle is not None:
            select.select([handle], [], [])  # readable once the process has ended
        else:
            while os.getppid() == parent:
                time.sleep(1.0)
        os._exit(1)  # the trainer died: nothing will ever be sent to this rank

    threading.Thread(target=watch, name="fulmen-dp-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    """Run one local rank (what ``spawn_local_ranks`` starts)."""
    parser = argparse.ArgumentParser(prog="python -m fulmen.algorithms.parallel.rank_main")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--init-method", required=True)
    parser.add_argument("--backend", default=None)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--parent", type=int, default=None)
    args = parser.parse_args(argv)
    if args.parent is not None:
        _exit_with_parent(args.parent)
    run_update_worker(
        args.rank,
        args.world_size,
        args.init_method,
        backend=args.backend,
        timeout_s=args.timeout_s,
    )


if __name__ == "__main__":
    main()
