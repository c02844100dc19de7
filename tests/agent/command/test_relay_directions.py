"""The sandbox's relay passes on an answer even when the request's rest can no longer be sent.

A gateway may answer from a request's headers (401, 404) and close. If the relay, starved of CPU
meanwhile, wakes to the agent's request body and the answer at once, it used to try the body
first, meet the closed socket and close both directions, dropping the answer: the agent read
"Remote end closed connection without response" (two sandbox tests failed so under CI load).
The relay is stopped (SIGSTOP) to make that order certain: the body reaches it before the answer.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import fulmen.agent.command.relay as relay_module
from tests.gateway.scripted_upstream import free_socket

ANSWER = b"HTTP/1.1 404 Not Found\r\nContent-Length: 11\r\nConnection: close\r\n\r\nnot a path\n"


def _early_answering_peer(
    server: socket.socket, heard: threading.Event, answer: threading.Event
) -> None:
    """Stand in for the link: take the headers, then (when told) answer and close."""
    with server:
        connection, _ = server.accept()
        with connection:
            connection.recv(65536)  # the headers
            heard.set()
            answer.wait(10)
            connection.sendall(ANSWER)
        # closed with the body still to come


def _connect(port: int) -> socket.socket:
    """Connect to the relay once it listens (no probe: each connection it takes is joined)."""
    for _ in range(500):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            time.sleep(0.01)
    raise RuntimeError("the relay did not listen")


def test_an_early_answer_survives_a_body_that_meets_a_closed_peer(tmp_path: Path) -> None:
    held = free_socket()
    port = held.getsockname()[1]
    held.close()
    path = tmp_path / "link.sock"
    heard, answer = threading.Event(), threading.Event()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)  # before the relay starts: it connects here per connection it accepts
    peer = threading.Thread(target=_early_answering_peer, args=(server, heard, answer))
    peer.start()
    relay = subprocess.Popen(
        [sys.executable, "-I", "-S", relay_module.__file__, "--listen", str(port), str(path),
         "--", "sleep", "60"]
    )  # fmt: skip
    try:
        with _connect(port) as agent:
            agent.sendall(b"POST /v1/x HTTP/1.1\r\nHost: g\r\nContent-Length: 4000\r\n\r\n")
            assert heard.wait(10)
            os.kill(relay.pid, signal.SIGSTOP)  # a relay starved of CPU
            agent.sendall(b"a" * 4000)  # reaches the relay first ...
            time.sleep(0.2)
            answer.set()  # ... then the answer, and the peer closes
            peer.join(10)
            time.sleep(0.2)
            os.kill(relay.pid, signal.SIGCONT)
            received = b""
            try:
                while chunk := agent.recv(65536):
                    received += chunk
            except ConnectionResetError:
                received += b"<reset>"
    finally:
        relay.kill()
        relay.wait()
    assert received == ANSWER
