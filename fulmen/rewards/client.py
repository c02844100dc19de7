"""The judge's model calls: ``POST {base_url}/chat/completions``, each one recorded.

Every call carries ``x-fulmen-agent: judge`` and, when the config names one, the API key from
its environment variable as a bearer token. With ``record_calls`` each call (failed ones too)
becomes an ``LLMCallCreate`` with no rollout and the agent name ``judge``, handed to
``record`` (the trainer stores it), so the judge's tokens and time are visible next to the
agent's; pointed at a fulmen gateway instead, the gateway records the call under the same
name from the header.

A call that met a 429, a 5xx, a connection error or a timeout is sent again as
``JudgeConfig.retry`` says (``fulmen.rewards.retry``); each try is its own call record.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import httpx

from fulmen.chat_call import ChatCall, post_chat
from fulmen.errors import EngineError
from fulmen.rewards.config import JudgeConfig
from fulmen.rewards.retry import backoff_of, retry_decision
from fulmen.types import LLMCallCreate, LLMChoice
from fulmen.types.records import AGENT_NAME_HEADER

__all__ = ["JUDGE_AGENT", "CallRecorder", "JudgeClient", "Sleep"]

_log = logging.getLogger(__name__)

JUDGE_AGENT: Final = "judge"
"""The agent name the judge's call records carry."""

CallRecorder = Callable[[Sequence[LLMCallCreate]], Awaitable[Any]]
"""Stores call records (``Store.add_llm_calls``)."""

Sleep = Callable[[float], Awaitable[Any]]
"""Waits a number of seconds (``asyncio.sleep``; tests pass one that only notes the wait)."""


class JudgeClient:
    """Chat completions from the judge endpoint of ``config``.

    Args:
        config: the endpoint, model, sampling and timeout.
        api_key: sent as a bearer token when set.
        record: stores the call records (``None``: none are kept).
        transport: an ``httpx`` transport for tests.
        sleep: waits between tries (``asyncio.sleep``).

    ``retries`` counts the tries sent again so far.
    """

    def __init__(
        self,
        config: JudgeConfig,
        *,
        api_key: str | None = None,
        record: CallRecorder | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.config = config
        self.retries = 0
        self._sleep = sleep
        self._backoff = backoff_of(config.retry)
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

        A retryable failure is sent again as ``config.retry`` says. Raises ``EngineError``
        naming the endpoint when it cannot be reached, answers with an error status or gives
        no message text, after the last try.
        """
        request = self.request(messages)
        first = time.monotonic()
        tries = 0
        while True:
            call = await post_chat(self._http, self.base_url, request)
            tries += 1
            await self._record(request, call)
            if call.error is None and call.text is not None:
                return call.text
            decision = retry_decision(
                call,
                retry=self.config.retry,
                backoff=self._backoff,
                tries=tries,
                elapsed_s=time.monotonic() - first,
                now=time.time(),
            )
            if decision.wait_s is None:
                problem = call.error or "no message text in the reply"
                raise EngineError(
                    f"the judge at {self.base_url} (model {self.config.model!r}) failed: "
                    f"{problem}" + (f"; {decision.reason}" if decision.reason else "")
                )
            self.retries += 1
            _log.info(
                "judge call to %s failed (%s); try %d of %d in %.2f s",
                self.base_url,
                call.error,
                tries + 1,
                self.config.retry.attempts,
                decision.wait_s,
            )
            await self._sleep(decision.wait_s)

    async def _record(self, request: dict[str, Any], call: ChatCall) -> None:
        """Hand one try's call record to ``record`` (when calls are recorded)."""
        if self.record is None:
            return
        await self.record(
            [
                LLMCallCreate(
                    call_id=f"{JUDGE_AGENT}-{uuid.uuid4().hex}",
                    request=request,
                    response=call.response,
                    choices=[LLMChoice(text=call.text)] if call.text is not None else [],
                    model=self.config.model,
                    upstream=self.base_url,
                    started_at=call.started_at,
                    latency_s=call.latency_s,
                    usage=call.usage,
                    error=call.error,
                    agent_name=JUDGE_AGENT,
                )
            ]
        )
