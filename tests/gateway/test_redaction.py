"""Redaction: personal data never reaches the store, and redacted calls lose their token ids."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from fulmen.errors import ConfigError
from fulmen.gateway import GatewayConfig, create_app
from fulmen.gateway.capture_config import RedactionConfig
from fulmen.gateway.redaction import Redactor, is_luhn_valid
from fulmen.store import open_store
from fulmen.transitions.trajectory import TransitionOptions, load_trajectory
from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

EMAIL = "jane.doe@example.org"
PHONE = "+44 20 7946 0958"
CARD = "4111 1111 1111 1111"  # passes Luhn
ORDER = "order 4111111111111112"  # 16 digits failing Luhn: an ordinary number, kept
# "7946 0958": any fragment of the phone number, but not four digits alone, which a stored
# timestamp or a random id can hold by chance (created 1796179468 failed a run once).
SECRETS = (EMAIL, PHONE, CARD, "4111111111111111", "jane.doe", "7946 0958")


def shout(text: str) -> str:
    """A redaction hook: hides a customer's name."""
    return text.replace("Jane", "[NAME]")


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Running]:
    store = await open_store(f"sqlite:///{tmp_path / 'r.db'}", watchdog_interval=None)
    script = Script()
    config = GatewayConfig(
        flush_interval_s=0.01,
        connect_retries=0,
        redaction=RedactionConfig(hook="tests.gateway.test_redaction:shout"),
    )
    async with serve_app(create_upstream_app(script)) as upstream:
        app = create_app(store, [f"{upstream}/v1"], config=config)
        async with serve_app(app) as url:
            yield Running(url, app.state.gateway, store, script)
    await store.aclose()


async def test_every_stored_field_is_redacted_and_token_ids_are_dropped(gw: Running) -> None:
    rid, aid = await new_attempt(gw.store)
    gw.script.replies.append(
        Reply(tool_calls=[("lookup", {"email": EMAIL, "phone": PHONE, "note": ORDER})])
    )
    gw.script.replies.append(Reply(content=f"Jane, your card {CARD} is on file; mail {EMAIL}"))
    gw.script.replies.append(Reply(content="plain answer"))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You help Jane."},
        {"role": "user", "content": [{"type": "text", "text": f"I am {EMAIL}, call {PHONE}"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "pay", "arguments": orjson.dumps({"card": CARD}).decode()},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": f"paid with {CARD}; {ORDER}"},
    ]
    base = gw.base_url(rid, aid)
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(2):
            reply = await client.post(
                f"{base}/chat/completions", json={"model": "m", "messages": messages}
            )
            assert reply.status_code == 200
        # The agent itself gets the real reply: redaction is only about what is stored.
        assert CARD in reply.json()["choices"][0]["message"]["content"]
        clean = await client.post(
            f"{base}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "2 + 2?"}]},
        )
        assert clean.status_code == 200
    calls = await gw.calls(rid)
    assert len(calls) == 3
    for call in calls[:2]:
        stored = call.model_dump_json()
        for secret in SECRETS:
            assert secret not in stored, secret
        assert "[EMAIL]" in stored and "[CARD]" in stored and "[NAME]" in stored
        assert "4111111111111112" in stored  # not a card number: not redacted
        assert not call.is_token_level and call.prompt_token_ids is None
        assert all(c.token_ids is None and c.logprobs is None for c in call.choices)
    assert "[PHONE]" in calls[0].model_dump_json()
    assert calls[2].is_token_level and calls[2].prompt_token_ids is not None
    # Transitions need token ids: the redacted calls give no transitions.
    trajectory = await load_trajectory(gw.store, rid, options=TransitionOptions(missing_reward=0.0))
    assert [t.call_ids for t in trajectory.transitions] == [[calls[2].call_id]]
    async with httpx.AsyncClient(timeout=60) as client:
        health = (await client.get(f"{gw.url}/healthz")).json()
    assert health["redacted_calls"] == 2


def test_card_numbers_need_the_luhn_check() -> None:
    assert is_luhn_valid("4111111111111111") and is_luhn_valid("5555555555554444")
    assert not is_luhn_valid("4111111111111112")
    redactor = Redactor(RedactionConfig(patterns=("card",)))
    assert redactor.text("pay 5555-5555-5555-4444 now") == "pay [CARD] now"
    kept = "invoice 1234567890123 of 2026-11-22, ts 1763800000123"
    assert redactor.text(kept) == kept


def test_phone_numbers_need_a_separator_or_a_plus() -> None:
    redactor = Redactor(RedactionConfig(patterns=("phone",)))
    assert redactor.text("call (415) 555-2671 or +1 415 555 2671") == ("call [PHONE] or [PHONE]")
    assert redactor.text("id 4155552671 and 2026-11-22") == "id 4155552671 and 2026-11-22"


def test_a_hook_that_cannot_be_loaded_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no_such_module"):
        Redactor(RedactionConfig(hook="no_such_module:f"))


def test_scanning_number_runs_only_redacts_what_the_patterns_find_in_the_whole_text() -> None:
    import random
    import re

    from fulmen.gateway import redaction

    def reference(text: str) -> str:  # the exact patterns over the whole text
        text = redaction._CARD.sub(redaction._card, text)  # pyright: ignore[reportPrivateUsage]
        return redaction._PHONE.sub("[PHONE]", text)  # pyright: ignore[reportPrivateUsage]

    redactor = Redactor(RedactionConfig(patterns=("card", "phone")))
    pieces = ["4111", "1111", "5555", "4444", "415", "555", "2671", "+44", "(", ")", " ", "-",
              ".", "+", "x", "ab", "7", "0", "12", "\n"]  # fmt: skip
    rng = random.Random(14)
    changed = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 24)))
        expected = reference(text)
        assert redactor.text(text) == expected, text
        changed += expected != text
    assert changed > 100  # the generated texts did exercise the patterns
    assert re.search(r"\d", redactor.text("call +44 20 7946 0958 now")) is None
