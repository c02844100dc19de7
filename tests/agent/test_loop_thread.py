"""An attempt's event loop closes cleanly behind an agent that never closed its HTTP client.

The README's first agent used to create ``AsyncOpenAI()`` in the agent function and never close
it; the client's pooled connections outlived the attempt's loop, and the garbage collector's
later ``aclose`` printed an "Event loop is closed" traceback per attempt (issue 48). The check
runs in a fresh interpreter, because those tracebacks go to stderr through asyncio's and
Python's last-resort handlers, outside pytest's capture of the test's own output.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from openai import AsyncOpenAI

    from fulmen.agent.loop_thread import LoopThreads

    class Upstream(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client pools the connection

        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            body = json.dumps({
                "id": "c", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "hi"}}],
            }).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"

    async def agent():
        client = AsyncOpenAI(base_url=url, api_key="k")  # never closed, as the old README's
        reply = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
        return reply.choices[0].message.content

    async def main():
        threads = LoopThreads()
        for _ in range(4):
            print(await threads.run(agent))
            gc.collect()  # collects the client on this thread, after its loop closed
        threads.close()

    asyncio.run(main())
    gc.collect()
    """
)


def test_an_unclosed_client_leaves_no_traceback_behind_its_attempt() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hi"] * 4
    assert "Traceback" not in done.stderr, done.stderr
    assert "Event loop is closed" not in done.stderr, done.stderr
