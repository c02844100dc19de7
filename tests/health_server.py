"""A minimal HTTP server for port tests: ``python -m tests.health_server --port N``.

Answers ``GET /health`` with 200 and its own process id, and ``--instance ID`` in the
``x-fulmen-instance`` header as fulmen's engines do, so a test can tell which process answered.
Binding a taken port fails the way any Python server's does (``OSError: [Errno 98] Address
already in use``), and the process exits with code 1.
"""

from __future__ import annotations

import argparse
import os
from http.server import BaseHTTPRequestHandler, HTTPServer


class _Health(BaseHTTPRequestHandler):
    instance: str | None = None

    def do_GET(self) -> None:
        body = str(os.getpid()).encode()
        self.send_response(200 if self.path == "/health" else 404)
        if self.instance is not None:
            self.send_header("x-fulmen-instance", self.instance)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    """Serve ``/health`` on ``127.0.0.1:--port`` until stopped."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--instance", default=None)
    args = parser.parse_args()
    handler = type("Health", (_Health,), {"instance": args.instance})
    HTTPServer(("127.0.0.1", args.port), handler).serve_forever()


if __name__ == "__main__":
    main()
