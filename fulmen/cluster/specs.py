"""What each actor of the fleet runs: the fulmen command of the store, an engine, a runner.

Every service is the same command a user would start by hand (``fulmen store serve``,
``fulmen serve``, ``fulmen runner``), so it behaves on a Ray node exactly as it does alone.
Secrets travel in the child's environment (``FULMEN_STORE_TOKEN``, ``FULMEN_GATEWAY_TOKEN``),
never on a command line that ``ps`` shows.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

from fulmen.cluster.actors import ServiceSpec
from fulmen.engines.config import EngineConfig
from fulmen.settings import launcher_variable

__all__ = ["engine_spec", "runner_spec", "store_spec"]


def store_spec(*, name: str, db_url: str, token: str, port: int, log_dir: Path) -> ServiceSpec:
    """``fulmen store serve`` of ``db_url`` with a token and the watchdog every second."""
    return ServiceSpec(
        kind="store",
        name=name,
        module="fulmen",
        args=("store", "serve", "--db", db_url, "--watchdog-interval", "1"),
        env={"FULMEN_STORE_TOKEN": token},
        log_dir=str(log_dir),
        port=port,
        health_path="/health",
        ready_timeout_s=120.0,
    )


def engine_spec(
    engine: EngineConfig,
    *,
    name: str,
    model: str,
    port: int,
    threads: int,
    log_dir: Path,
    board: str,
    token: str | None = None,
) -> ServiceSpec:
    """Run the engine server (``python -m fulmen.cli.serve``) that ``engine`` describes.

    ``builtin`` or ``vllm``; the built-in engine's batch, dtype and prefix cache come from
    ``engine`` (vLLM's dtype too), its torch threads from ``threads`` (the replica's CPUs).
    ``token``: the admin token its weight-changing routes require, in its environment
    (``$FULMEN_ENGINE_TOKEN``).
    """
    args = ["--model", model, "--max-lora-rank", str(engine.max_lora_rank)]
    if engine.kind == "builtin":
        args += ["--max-batch", str(engine.max_batch), "--threads", str(threads)]
        args += engine.builtin_serve_flags()
    else:
        args += ["--engine", "vllm", "--dtype", engine.dtype]
    return ServiceSpec(
        kind="engine",
        name=name,
        module="fulmen.cli.serve",
        args=tuple(args),
        env={"FULMEN_ENGINE_TOKEN": token} if token is not None else {},
        log_dir=str(log_dir),
        port=port,
        health_path="/health",
        allow_remote_flag=True,
        ready_timeout_s=engine.startup_timeout_s,
        death_signal=signal.SIGTERM,  # `fulmen serve` then stops a vLLM server it started
        board=board,
    )


def runner_spec(
    *,
    name: str,
    args: Sequence[str],
    store_token: str | None,
    gateway_token: str | None,
    python_path: Sequence[Path],
    log_dir: Path | None,
    worker_id: str,
    exits_when_done: bool = False,
) -> ServiceSpec:
    """``fulmen runner ARGS`` with the tokens in its environment and the agent importable.

    ``args`` hold everything but ``--worker-id`` (each incarnation gets its own, from
    ``worker_id``) and the tokens. ``log_dir`` ``None``: the node's temporary directory.
    """
    env: dict[str, str] = {}
    if store_token:
        env["FULMEN_STORE_TOKEN"] = store_token
    if gateway_token:
        env["FULMEN_GATEWAY_TOKEN"] = gateway_token
    paths = [str(p) for p in python_path]
    if paths:
        inherited = launcher_variable("PYTHONPATH")
        env["PYTHONPATH"] = os.pathsep.join([*paths, *([inherited] if inherited else [])])
    return ServiceSpec(
        kind="runner",
        name=name,
        module="fulmen",
        args=("runner", *args),
        env=env,
        cwd=paths[0] if paths else os.getcwd(),
        log_dir=str(log_dir) if log_dir is not None else "",
        worker_id=worker_id,
        exits_when_done=exits_when_done,
    )
