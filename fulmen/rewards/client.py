"""The judge's model calls: ``POST {base_url}/chat/completions``, each one recorded.

Every call carries ``x-fulmen-agent: judge`` and, when the config names one, the API key from
its environment variable as a bearer token. With ``record_calls`` each call (failed ones too)
becomes an ``LLMCallCreate`` with no rollout and the agent name ``judge``, handed to
``record`` (the trainer stores it), so the judge's tokens and time are visible next to the
agent's; pointed at a fulmen gateway instead, the gateway records the call under the same
name from the header.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import httpx

from fulmen.chat_call import post_chat
from fulmen.errors import EngineError
from fulmen.rewards.config import JudgeConfig
from fulmen.types import LLMCallCreate, LLMChoice
from fulmen.types.records import AGENT_NAME_HEADER

__all__ = ["JUDGE_AGENT", "CallRecorder", "JudgeClient"]

JUDGE_AGENT: Final = "judge"
"""The agent name the judge's call records carry."""

CallRecorder = Callable[[Sequence[LLMCallCreate]], Awaitable[Any]]
"""Stores call records (``Store.add_llm_calls``)."""


class JudgeClient:
    """Chat completions from the judge endpoint of ``config``.

    Args:
        config: the endpoint, model, sampling and timeout.
        api_key: sent as a bearer token when set.
        record: stores the call records (``None``: none are kept).
        transport: an ``httpx`` transport for tests.
    """

    def __init__(
        self,
        config: JudgeConfig,
        *,
        api_key: str | None = None,
        record: CallRecorder | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.record = record if config.record_calls else None
        headers = {AGENT_NAME_HEADER: JUDGE_AGENT}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._http = httpx.AsyncClient(
            timeout=config.timeout_s, headers=headers, transport=transport
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    def request(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """Return the request body sent for ``messages`` (its hash is the cache key)."""
        return {"model": self.config.model, "messages": messages, **self.config.sampling}

    async def complete(self, messages: list[dict[str, str]]) -> str:
        """Send ``messages``; return the reply's text.

        Raises ``EngineError`` naming the endpoint when it cannot be reached, answers with an
        error status or gives no message text.
        """
        request = self.request(messages)
        call = await post_chat(self._http, self.base_url, request)
        response, error, text, usage = call.response, call.error, call.text, call.usage
        started, latency = call.started_at, call.latency_s
        if self.record is not None:
            await self.record(
                [
                    LLMCallCreate(
                        call_id=f"{JUDGE_AGENT}-{uuid.uuid4().hex}",
                        request=request,
                        response=response,
                        choices=[LLMChoice(text=text)] if text is not None else [],
                        model=self.config.model,
                        upstream=self.base_url,
                        started_at=started,
                        latency_s=latency,
                        usage=usage,
                        error=error,
                        agent_name=JUDGE_AGENT,
                    )
                ]
            )
        if error is not None or text is None:
            raise EngineError(
                f"the judge at {self.base_url} (model {self.config.model!r}) failed: "
                f"{error or 'no message text in the reply'}"
            )
        return text
