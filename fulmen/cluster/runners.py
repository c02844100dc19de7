"""``fulmen runner --ray N``: N runners as actors on a running Ray cluster, against any store.

Each actor runs the same ``fulmen runner`` command with the same options (and its own worker
id), so a runner on Ray behaves exactly like one started by hand. Ray restarts a runner whose
process died; its unfinished attempts are found lost by the store's watchdog and retried.
Ctrl-C or SIGTERM stops the runners the way ``fulmen runner`` stops (running rollouts finish
for ``--shutdown-grace`` seconds, the rest are released) and ends the actors. With
``--until-idle`` or ``--max-rollouts`` the command returns once every runner finished.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from fulmen.cluster.config import ClusterConfig
from fulmen.cluster.ray_fleet import RayFleet
from fulmen.cluster.specs import runner_spec

__all__ = ["run_ray_runners"]

logger = logging.getLogger(__name__)


def run_ray_runners(
    *,
    count: int,
    address: str,
    cpus: float,
    args: Sequence[str],
    store_token: str | None,
    gateway_token: str | None,
    worker_id: str | None,
    exits_when_done: bool,
    grace_s: float,
    python_path: Sequence[Path] = (),
    out: TextIO | None = None,
) -> int:
    """Run ``count`` ``fulmen runner ARGS`` actors until stopped or done; print their counts.

    Args:
        count: runner actors to start.
        address: the Ray cluster (``auto`` or ``HOST:PORT``).
        cpus: CPUs each runner asks Ray for.
        args: ``fulmen runner`` options for every runner (``--store``, ``--agent``, ...),
            without ``--worker-id`` and tokens.
        store_token: the store's token, handed to the runners in their environment.
        gateway_token: the gateway's token, likewise.
        worker_id: the runners' worker ids start with this (default: the Ray namespace).
        exits_when_done: the runners exit on their own (``--until-idle``, ``--max-rollouts``):
            return once all of them did.
        grace_s: how long a stopping runner may take (its ``--shutdown-grace`` plus a margin).
        python_path: directories put on the runners' ``sys.path`` (default: this directory).
        out: where the final JSON line goes (default: stdout).

    Returns:
        The exit code: 0, or 1 when a runner failed.
    """
    config = ClusterConfig(backend="ray", address=address, runners=count, runner_cpus=cpus)
    fleet = RayFleet(config)
    stop = threading.Event()
    failure: str | None = None
    results: list[dict[str, Any]] = []
    try:
        fleet.connect()
        _stop_on_signals(stop)  # after ray.init, which installs handlers of its own
        base = worker_id or f"{fleet.namespace}-runner"
        specs = [
            runner_spec(
                name=f"{fleet.namespace}-runner-{i}",
                args=args,
                store_token=store_token,
                gateway_token=gateway_token,
                python_path=list(python_path) or [Path.cwd()],
                log_dir=None,
                worker_id=f"{base}-{i}",
                exits_when_done=exits_when_done,
            )
            for i in range(count)
        ]
        infos = fleet.place(specs, num_cpus=cpus)
        nodes = sorted({str(i["node_ip"]) for i in infos})
        logger.info("%d runners on Ray (nodes: %s); Ctrl-C stops them", count, ", ".join(nodes))
        while not stop.wait(0.5):
            fleet.check()
            if exits_when_done and fleet.finished("runner"):
                break
    except Exception as exc:
        failure = str(exc)
        logger.error("fulmen runner --ray: %s", exc)
    finally:
        if fleet.node_id:
            results = fleet.stop_runners(grace_s)
            restarts = len(fleet.restarts)
            fleet.close()
        else:
            restarts = 0
    print(json.dumps(_summary(results, restarts, failure)), file=out or sys.stdout, flush=True)
    return 1 if failure else 0


def _stop_on_signals(stop: threading.Event) -> None:
    def handle(signum: int, frame: object) -> None:
        del signum, frame
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handle)


def _summary(
    results: Sequence[dict[str, Any]], restarts: int, failure: str | None
) -> dict[str, Any]:
    """Each runner's counts (its last stdout line) and their sums."""
    workers: list[dict[str, Any]] = []
    for result in results:
        try:
            counts = json.loads(result.get("last_line") or "")
        except ValueError:
            counts = None
        workers.append(counts if isinstance(counts, dict) else {"name": result.get("name")})
    totals: dict[str, float] = {}
    for counts in workers:
        for key, value in counts.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
    summary: dict[str, Any] = {"runners": len(results), "restarts": restarts, **totals}
    summary["workers"] = workers
    if failure:
        summary["error"] = failure
    return summary
