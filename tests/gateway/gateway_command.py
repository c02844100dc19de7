"""``fulmen gateway`` as a real subprocess on a port it picks itself.

The gateway is started with ``--port 0`` and its URL read from the line uvicorn logs once it
listens. A port picked by the test and closed before the gateway binds it can be taken in
between by another test's server (xdist runs several at once): the test then talks to that
server, and a tracked call fails with "unknown rollout" from a gateway on another store.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

_LISTENING = re.compile(rb"Uvicorn running on (http://127\.0\.0\.1:\d+)")


@dataclass
class GatewayCommand:
    """A running ``fulmen gateway``: its URL, its standard error so far, its exit status."""

    url: str
    proc: asyncio.subprocess.Process
    log: bytearray = field(default_factory=bytearray)
    returncode: int | None = None

    @property
    def stderr(self) -> str:
        """What the gateway wrote to standard error (all of it, once it has exited)."""
        return self.log.decode(errors="replace")


@contextlib.asynccontextmanager
async def gateway_command(*args: str, env: dict[str, str]) -> AsyncIterator[GatewayCommand]:
    """Run ``fulmen gateway ARGS --port 0`` until it listens; SIGTERM and wait on exit.

    The yielded ``GatewayCommand`` gets ``returncode`` and its whole ``stderr`` once the
    context has left; a gateway that exits before listening fails with its standard error.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fulmen", "gateway", *args, "--port", "0",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    stream = proc.stderr
    log = bytearray()
    drain: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(60):  # only a bound on a hang: a start takes seconds
            while (listening := _LISTENING.search(log)) is None:
                line = await stream.readline()
                if not line:
                    raise AssertionError(f"the gateway exited before listening:\n{log.decode()}")
                log += line
        gateway = GatewayCommand(listening.group(1).decode(), proc, log)
        drain = asyncio.create_task(_drain(stream, log))  # a full pipe would stall the gateway
        yield gateway
        proc.send_signal(signal.SIGTERM)
        gateway.returncode = await asyncio.wait_for(proc.wait(), timeout=30)
        await drain
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if drain is not None and not drain.done():
            drain.cancel()


async def _drain(stream: asyncio.StreamReader, log: bytearray) -> None:
    while chunk := await stream.read(65536):
        log += chunk
