"""The critic's and editor's model calls: any OpenAI-compatible endpoint, each call recorded.

Each call is a plain ``POST {base_url}/chat/completions`` with the endpoint's own sampling
settings. Every call becomes an ``LLMCallCreate`` with no rollout and the agent name
``apo-critic`` or ``apo-editor``, handed to ``record`` (the trainer stores it), and its tokens
and seconds are added to ``OptimizerCost``, so what the optimizer itself spends is visible next
to the agent's rollouts.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from fulmen.chat_call import post_chat
from fulmen.errors import EngineError
from fulmen.types import LLMCallCreate, LLMChoice

__all__ = ["CallRecorder", "OptimizerClient", "OptimizerCost"]

CallRecorder = Callable[[Sequence[LLMCallCreate]], Awaitable[Any]]
"""Stores call records (``Store.add_llm_calls`` or the trainer's ``record_calls``)."""


@dataclass
class OptimizerCost:
    """What one optimizer agent spent: calls, prompt and completion tokens, seconds."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def metrics(self, agent: str) -> dict[str, float]:
        """Return the totals as metrics named ``<agent>/calls``, ``<agent>/prompt_tokens``, ..."""
        return {
            f"{agent}/calls": float(self.calls),
            f"{agent}/prompt_tokens": float(self.prompt_tokens),
            f"{agent}/completion_tokens": float(self.completion_tokens),
            f"{agent}/seconds": self.seconds,
        }


class OptimizerClient:
    """Chat completions for one optimizer agent (``apo-critic`` or ``apo-editor``).

    Args:
        agent: the agent name its call records carry.
        base_url: the endpoint's ``.../v1`` URL.
        model: the model name to request.
        api_key: sent as a bearer token when set.
        sampling: request fields added to every call.
        timeout_s: seconds to wait for one answer.
        record: stores the call records; ``None`` keeps no record (cost is still counted).
        transport: an ``httpx`` transport for tests.
    """

    def __init__(
        self,
        agent: str,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        sampling: dict[str, Any] | None = None,
        timeout_s: float = 120.0,
        record: CallRecorder | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.agent = agent
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.sampling = dict(sampling or {})
        self.record = record
        self.cost = OptimizerCost()
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(timeout=timeout_s, headers=headers, transport=transport)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def complete(self, messages: list[dict[str, str]]) -> str:
        """Send ``messages`` and return the reply's text.

        Raises ``EngineError`` naming the endpoint when it cannot be reached or answers with
        an error (the failed call is recorded too).
        """
        request: dict[str, Any] = {"model": self.model, "messages": messages, **self.sampling}
        call = await post_chat(self._http, self.base_url, request)
        response, error, text, usage = call.response, call.error, call.text, call.usage
        started, latency = call.started_at, call.latency_s
        self.cost.calls += 1
        self.cost.seconds += latency
        self.cost.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.cost.completion_tokens += int(usage.get("completion_tokens") or 0)
        if self.record is not None:
            await self.record([self._record(request, response, error, started, latency, text)])
        if error is not None or text is None:
            raise EngineError(
                f"{self.agent} at {self.base_url} (model {self.model!r}) failed: "
                f"{error or 'no message content in the reply'}"
            )
        return text

    def _record(
        self,
        request: dict[str, Any],
        response: dict[str, Any] | None,
        error: dict[str, Any] | None,
        started: float,
        latency: float,
        text: str | None,
    ) -> LLMCallCreate:
        usage = (response or {}).get("usage")
        return LLMCallCreate(
            call_id=f"{self.agent}-{uuid.uuid4().hex}",
            request=request,
            response=response,
            choices=[LLMChoice(text=text)] if text is not None else [],
            model=self.model,
            upstream=self.base_url,
            started_at=started,
            latency_s=latency,
            usage=usage if isinstance(usage, dict) else {},
            error=error,
            agent_name=self.agent,
        )
