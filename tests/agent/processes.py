"""Starting ``fulmen`` subprocesses (runners, the store service) for the process-level tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fulmen(*args: str, log: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m fulmen ARGS`` from the repository root, stderr into ``log``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "fulmen", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )


def runner(store_url: str, agent: str, *extra: str, log: Path) -> subprocess.Popen[bytes]:
    """A runner subprocess with fast heartbeats and polling."""
    return fulmen(
        "runner",
        "--store",
        store_url,
        "--agent",
        f"tests.agent.sample_agents:{agent}",
        "--heartbeat-interval",
        "0.2",
        "--poll-interval",
        "0.05",
        *extra,
        log=log,
    )


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """Wait for a runner to exit and parse its final JSON line of counts."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            stop(proc)
            raise AssertionError(f"process {proc.pid} did not exit within {timeout} s")
        await asyncio.sleep(0.05)
    out = proc.stdout.read().decode() if proc.stdout else ""
    if proc.stdout is not None:
        proc.stdout.close()
    assert proc.returncode == 0, f"exit code {proc.returncode}: {out}"
    return json.loads(out.strip().splitlines()[-1])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process group started by ``fulmen()`` (cleanup)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


async def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Poll an async predicate every 50 ms until true or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
