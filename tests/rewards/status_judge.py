"""A judge upstream that answers each call with a scripted HTTP status (a real server).

``StatusJudge.reply_for(body)`` answers when set, else ``answers`` are popped in order (then
``default``): a 200 is a chat completion
whose message is ``content``; anything else an OpenAI-style error with the given headers
(``Retry-After``). ``calls`` counts what arrived.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

GOOD = '{"reasoning": "fine", "scores": {"goal": 8}}'


@dataclass(frozen=True)
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content: str = GOOD


@dataclass
class StatusJudge:
    answers: deque[Answer] = field(default_factory=deque)
    default: Answer = field(default_factory=Answer)
    calls: int = 0
    reply_for: Callable[[dict[str, Any]], Answer] | None = None

    def next_answer(self, body: dict[str, Any]) -> Answer:
        if self.reply_for is not None:
            return self.reply_for(body)
        return self.answers.popleft() if self.answers else self.default


def create_status_app(judge: StatusJudge) -> Starlette:
    async def chat(request: Request) -> Response:
        body = orjson.loads(await request.body())
        judge.calls += 1
        answer = judge.next_answer(body)
        if answer.status != 200:
            body = {"error": {"message": f"scripted {answer.status}", "type": "scripted"}}
            return Response(
                orjson.dumps(body),
                answer.status,
                headers=answer.headers,
                media_type="application/json",
            )
        reply = {
            "id": f"chatcmpl-{judge.calls}",
            "object": "chat.completion",
            "model": "judge-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        return Response(orjson.dumps(reply), media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
