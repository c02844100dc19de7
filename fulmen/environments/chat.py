"""One chat turn of a built-in environment agent, sent to the rollout's recorded endpoint.

The built-in agents (Reasoning Gym's single turn, TextArena's and OpenEnv's loops) talk to the
model through the rollout's ``LLM`` (the gateway URL of the attempt, so every call is recorded
at token level); the gateway applies the run's sampling settings. A call that fails fails the
rollout: an environment step must not be taken on a reply the model never gave.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fulmen.chat_call import post_chat
from fulmen.errors import GatewayError
from fulmen.tls import tls_context

if TYPE_CHECKING:
    import httpx

    from fulmen.agent.context import LLM

__all__ = ["Reply", "chat_client", "send_chat"]


@dataclass(frozen=True)
class Reply:
    """The model's reply to one turn.

    Attributes:
        text: the reply's text (``""`` when the model wrote nothing).
        response_id: the response's ``id``: a per-call reward names its call by it.
    """

    text: str
    response_id: str | None


def chat_client(llm: LLM, *, timeout_s: float = 600.0) -> httpx.AsyncClient:
    """Return an HTTP client that authenticates as the rollout (close it after the rollout)."""
    import httpx

    return httpx.AsyncClient(
        headers={"Authorization": f"Bearer {llm.api_key}"},
        timeout=httpx.Timeout(timeout_s),
        verify=tls_context(),  # one per rollout: a context of its own would cost ~20 ms CPU
    )


async def send_chat(
    http: httpx.AsyncClient, llm: LLM, messages: list[dict[str, Any]], **fields: Any
) -> Reply:
    """Send one chat completion to ``llm`` and return its reply; ``GatewayError`` on failure."""
    call = await post_chat(http, llm.base_url, {"model": llm.model, "messages": messages, **fields})
    if call.error is not None or call.response is None:
        raise GatewayError(f"the model call of this rollout failed: {call.error}")
    response_id = call.response.get("id")
    return Reply(call.text or "", response_id if isinstance(response_id, str) else None)
