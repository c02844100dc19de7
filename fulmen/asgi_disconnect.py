"""Stop work for a client that went away before its reply began.

ASGI servers do not cancel a request's handler when its client disconnects: a handler waiting
for a slow upstream or an engine's generation goes on, and so does the work it waits for. For
a model call that work is a generation other rollouts queue behind; an agent that opens many
calls and exits would leave the engine busy long after it is gone. ``CancelOnDisconnect``
watches for the disconnect once the request body is in and cancels the handler if it comes
before the response starts (a streamed reply's own disconnect handling takes over from there).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["CancelOnDisconnect"]

Message = dict[str, Any]


class CancelOnDisconnect:
    """Pure-ASGI middleware: cancel the handler when its client disconnects before the reply."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Run the app; cancel it if the client disconnects before the response starts."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_in = asyncio.Event()
        replying = False

        async def receive_body() -> Message:
            message: Message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_in.set()
            return message

        async def send_reply(message: Message) -> None:
            nonlocal replying
            if message["type"] == "http.response.start":
                replying = True
                watcher.cancel()
            await send(message)

        async def watch() -> bool:
            """Return ``True`` once the client has gone (before the reply began)."""
            await body_in.wait()
            while True:
                message: Message = await receive()
                if message["type"] == "http.disconnect":
                    return not replying

        # The handler in a task of its own, so that it alone is cancelled.
        handler = asyncio.create_task(self.app(scope, receive_body, send_reply))
        watcher = asyncio.create_task(watch(), name="fulmen-disconnect-watch")
        try:
            await asyncio.wait({handler, watcher}, return_when=asyncio.FIRST_COMPLETED)
            # Gone before the reply began: the handler's work is for nobody.
            gone = watcher.done() and not watcher.cancelled() and watcher.result()
            if gone and not handler.done():
                handler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await handler
                return
            await handler
        finally:
            for task in (handler, watcher):
                task.cancel()
