"""The support bot: routes a customer's message to a department, through the plain OpenAI client.

It is an ordinary deployed agent: it knows nothing of fulmen. It calls an OpenAI-compatible
endpoint (here fulmen's gateway in front of the model) and names the conversation in an
``x-session-id`` header, as many production apps already do. The model sees four worked
examples and writes one line, ``ROUTE: <department>``; the bot answers the customer in a fixed
format with the department it parsed. A base model follows the format but picks the wrong
department for part of the messages: there is room to learn.
"""

from __future__ import annotations

import re
from typing import Any

from openai import AsyncOpenAI

__all__ = ["DEPARTMENTS", "INSTRUCTIONS", "MAX_TOKENS", "parse_route", "reply_text", "route"]

DEPARTMENTS = ("billing", "shipping", "technical", "account")
INSTRUCTIONS = (
    "You route messages to a shop's support teams. Answer with one line, ROUTE: followed by "
    "one team: billing (charges, invoices, refunds of money), shipping (parcels, delivery, "
    "couriers), technical (the app or website not working), account (login, password, profile)."
)
_EXAMPLES = (
    ("I was charged twice for the same order.", "billing"),
    ("My parcel has not arrived and the tracking page shows nothing.", "shipping"),
    ("The app closes itself every time I open my basket.", "technical"),
    ("I forgot my password and the reset mail never comes.", "account"),
)
_ROUTE = re.compile(r"ROUTE:\s*(" + "|".join(DEPARTMENTS) + ")", re.IGNORECASE)
MAX_TOKENS = 8


def messages(text: str) -> list[dict[str, str]]:
    """The chat the model sees: instructions, the four examples, the customer's message."""
    chat = [{"role": "system", "content": INSTRUCTIONS}]
    for example, team in _EXAMPLES:
        chat += [
            {"role": "user", "content": f"Customer: {example}"},
            {"role": "assistant", "content": f"ROUTE: {team}"},
        ]
    return [*chat, {"role": "user", "content": f"Customer: {text}"}]


def parse_route(output: str) -> str | None:
    """The department ``ROUTE:`` starts with (what the bot reads), else ``None``.

    Only the team name is read: a base model sometimes runs on after it
    (``ROUTE: accountdata``), which the customer never sees.
    """
    match = _ROUTE.search(output)
    return None if match is None else match.group(1).lower()


def reply_text(team: str | None, ticket: str) -> str:
    """The bot's fixed-format answer to the customer."""
    if team is None:
        return f"Thanks for writing. A person will read your message soon (ticket {ticket})."
    return f"Thanks for writing. Your request is with our {team} team (ticket {ticket})."


async def route(
    client: AsyncOpenAI,
    model: str,
    text: str,
    *,
    session_id: str | None = None,
    temperature: float = 0.0,
) -> tuple[str | None, str]:
    """Ask the model for the route; returns the parsed department and the raw model output."""
    headers: dict[str, Any] = {"x-session-id": session_id} if session_id else {}
    completion = await client.chat.completions.create(
        model=model,
        messages=messages(text),  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        temperature=temperature,
        stop=["\n"],
        extra_headers=headers,
    )
    output = completion.choices[0].message.content or ""
    return parse_route(output), output
