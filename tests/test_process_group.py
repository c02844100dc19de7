from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from fulmen.engines.launcher import free_port
from fulmen.process_group import listens_on, stop_process_group

ROOT = Path(__file__).parents[1]


@contextlib.contextmanager
def health_server(port: int, instance: str = "") -> Iterator[subprocess.Popen[bytes]]:
    """``tests.health_server`` on ``port``, answering ``/health`` (stopped on exit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.health_server", "--port", str(port), "--instance", instance],
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None, "the health server exited"
            time.sleep(0.05)
        yield proc
    finally:
        stop_process_group(proc, 5.0)


def test_the_listening_child_is_told_from_another_process_on_the_port() -> None:
    port = free_port()
    with health_server(port) as server:
        assert listens_on(server, port)
        assert not listens_on(server, free_port())
        # A child that holds no socket is not the one answering on the server's port.
        idle = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
        )
        try:
            assert not listens_on(idle, port)
        finally:
            stop_process_group(idle, 5.0)


def test_a_listener_in_a_grandchild_counts() -> None:
    # Servers that fork their listener (vLLM's API server processes) are found in the tree.
    port = free_port()
    code = (
        "import subprocess, sys; subprocess.run([sys.executable, '-m', 'tests.health_server',"
        f" '--port', '{port}'])"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not listens_on(parent, port):
            assert time.monotonic() < deadline, "the grandchild never listened"
            time.sleep(0.05)
    finally:
        stop_process_group(parent, 5.0)
    assert not listens_on(parent, port)  # gone: nothing of it listens
