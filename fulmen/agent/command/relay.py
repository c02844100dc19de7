"""Inside a sandbox without a network: a TCP port that leads to the rollout's gateway only.

Run by path with ``python -I -S`` (standard library only) as the sandbox's first process. It
listens on ``127.0.0.1:PORT`` in the sandbox's own network namespace, starts the command, and
joins every connection to a Unix socket that the runner serves outside and connects to the
gateway (``fulmen.agent.command.gateway_link``). The command can thus reach its model URL and
nothing else: the namespace has no other interface. The relay exits with the command's status
(``128 + signal`` when a signal ended it, as a shell reports it).

    python -I -S relay.py PORT SOCKET_PATH -- PROGRAM ARGS...
"""

import asyncio
import signal
import subprocess
import sys

__all__ = ["pipe"]

_CHUNK = 65536


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until the end, then close the write side (the link uses it).

    Nothing of the bytes is read: HTTP keep-alive and streaming pass unchanged.
    """
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _join(
    socket_path: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
) -> None:
    try:
        link_r, link_w = await asyncio.open_unix_connection(socket_path)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(pipe(client_r, link_w), pipe(link_r, client_w))


async def _main(port: int, socket_path: str, command: list[str]) -> int:
    server = await asyncio.start_server(
        lambda r, w: _join(socket_path, r, w), "127.0.0.1", port, reuse_address=True
    )
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        print(f"fulmen: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, child.send_signal, signum)
    # One process and no threads: the relay counts against the command's process limit.
    while (code := child.poll()) is None:
        await asyncio.sleep(0.05)
    server.close()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    args = sys.argv[1:]
    split = args.index("--")
    sys.exit(asyncio.run(_main(int(args[0]), args[1], args[split + 1 :])))
