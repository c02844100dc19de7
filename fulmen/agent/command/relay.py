"""Inside a bubblewrap sandbox: start the command, and give it a port leading to its gateway.

Run by path with ``python -I -S`` (standard library only) as the sandbox's first process.

    python -I -S relay.py [--listen PORT SOCKET_PATH] [--marker PATH] -- PROGRAM ARGS...

With ``--listen`` it listens on ``127.0.0.1:PORT`` in the sandbox's own network namespace,
starts the command, and joins every connection to a Unix socket that the runner serves outside
and connects to the gateway (``fulmen.agent.command.gateway_link``). The command can thus reach
its model URL and nothing else: the namespace has no other interface. The relay exits with the
command's status (``128 + signal`` when a signal ended it, as a shell reports it). Without
``--listen`` (no network to give) it becomes the command (``exec``).

``--marker PATH`` is written once the command runs: a runner that finds no marker knows the
command never started (a program missing inside the sandbox, say), whatever it exited with.
"""

import os
import selectors
import signal
import socket
import sys

__all__ = ["main"]

_CHUNK = 65536


class _Flow:
    """One direction of a joined connection: bytes read from ``source`` go to ``sink``."""

    def __init__(self, source: socket.socket, sink: socket.socket) -> None:
        self.source, self.sink = source, sink
        self.pending = b""
        self.ended = False  # the source sent its end (or reset)
        self.broken = False  # the sink's peer is gone: the source is read and discarded
        self.shut = False  # the sink's write side is shut (once the source ended, all sent)


class _Relay:
    """Non-blocking joins of local TCP connections to the runner's Unix socket (selectors).

    No asyncio: its import alone took most of the relay's start on a loaded machine, and the
    relay starts once per rollout.
    """

    def __init__(self, listener: socket.socket, socket_path: str, child: int) -> None:
        self.selector = selectors.DefaultSelector()
        self.listener, self.socket_path = listener, socket_path
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.child_fd = os.pidfd_open(child)
        self.selector.register(self.child_fd, selectors.EVENT_READ, "child")
        self.flows: dict[socket.socket, list[_Flow]] = {}  # a socket -> the flows touching it

    def run(self) -> None:
        """Serve until the command exits."""
        while True:
            for key, events in self.selector.select():
                if key.data == "child":
                    return
                if key.data == "accept":
                    self._accept()
                else:
                    self._ready(key.fileobj, events)  # type: ignore[arg-type]

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        link = socket.socket(socket.AF_UNIX)
        try:
            link.connect(self.socket_path)
        except OSError:
            link.close()
            client.close()
            return
        for sock in (client, link):
            sock.setblocking(False)
        flows = [_Flow(client, link), _Flow(link, client)]
        for sock in (client, link):
            self.flows[sock] = flows
            self.selector.register(sock, selectors.EVENT_READ, "data")

    def _ready(self, sock: socket.socket, events: int) -> None:
        flows = self.flows.get(sock)
        if flows is None:
            return
        # Each direction ends on its own: a gateway that answered early and closed (a 401 or
        # 404 decided from the headers) must not take the answer still on its way to the
        # command with it when the command's request body then meets the closed socket.
        for flow in flows:
            if flow.source is sock and events & selectors.EVENT_READ and not flow.pending:
                try:
                    data = sock.recv(_CHUNK)
                except OSError:  # reset: an end, after whatever was read before it
                    data = b""
                if not data:
                    flow.ended = True
                elif not flow.broken:
                    flow.pending = data
            if flow.sink is sock or flow.pending or (flow.ended and not flow.shut):
                self._write(flow)
        if all(flow.ended and not flow.pending for flow in flows):
            self._close(flows)
        else:
            self._watch(flows)

    @staticmethod
    def _write(flow: _Flow) -> None:
        if flow.pending:
            try:
                sent = flow.sink.send(flow.pending)
            except BlockingIOError:
                sent = 0
            except OSError:  # the sink's peer is gone: drop this direction's bytes, not the other's
                flow.broken, flow.pending, sent = True, b"", 0
            flow.pending = flow.pending[sent:]
        if flow.ended and not flow.pending and not flow.shut:
            flow.shut = True  # the sink's reader sees the end now, not when both ended
            try:
                flow.sink.shutdown(socket.SHUT_WR)
            except OSError:  # the peer is gone already
                flow.pending = b""

    def _watch(self, flows: list[_Flow]) -> None:
        """Read a source only while its bytes are out; watch a sink while bytes wait for it."""
        wanted: dict[socket.socket, int] = {}
        for flow in flows:
            if not flow.pending and not flow.ended:
                wanted[flow.source] = wanted.get(flow.source, 0) | selectors.EVENT_READ
            if flow.pending:
                wanted[flow.sink] = wanted.get(flow.sink, 0) | selectors.EVENT_WRITE
        for sock in {flow.source for flow in flows}:
            events = wanted.get(sock, 0)
            registered = self._registered(sock)
            if events and registered:
                self.selector.modify(sock, events, "data")
            elif events:
                self.selector.register(sock, events, "data")
            elif registered:
                self.selector.unregister(sock)

    def _registered(self, sock: socket.socket) -> bool:
        try:
            self.selector.get_key(sock)
        except KeyError:
            return False
        return True

    def _close(self, flows: list[_Flow]) -> None:
        for sock in {flows[0].source, flows[0].sink}:
            if self._registered(sock):
                self.selector.unregister(sock)
            self.flows.pop(sock, None)
            sock.close()


def _cannot_run(program: str, exc: OSError) -> int:
    print(f"fulmen: cannot run {program!r}: {exc.strerror}", file=sys.stderr, flush=True)
    return 127 if isinstance(exc, FileNotFoundError) else 126


def _mark(marker: str | None) -> None:
    if marker is not None:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))


def _serve(port: int, socket_path: str, command: list[str], marker: str | None) -> int:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    listener.setblocking(False)
    try:
        # posix_spawn reports a program that cannot run as an error here, as exec would.
        child = os.posix_spawnp(command[0], command, os.environ)
    except OSError as exc:
        return _cannot_run(command[0], exc)
    _mark(marker)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: os.kill(child, signum))
    # One process and no threads: the relay counts against the command's process limit.
    _Relay(listener, socket_path, child).run()
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    """Run the command as the options say (see the module docstring); return its status."""
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    listen: tuple[int, str] | None = None
    marker = None
    index = 0
    while index < len(options):
        if options[index] == "--listen":
            listen = (int(options[index + 1]), options[index + 2])
            index += 3
        elif options[index] == "--marker":
            marker = options[index + 1]
            index += 2
        else:
            raise SystemExit(f"relay: unknown option {options[index]!r}")
    if listen is not None:
        return _serve(*listen, command, marker)
    _mark(marker)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        if marker is not None:
            os.unlink(marker)
        return _cannot_run(command[0], exc)
    return 0  # pragma: no cover: exec does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
