"""Redaction: personal data removed from a call record's text before the record is stored.

``Redactor`` applies built-in patterns (``email``, ``phone``, ``card``) and then an optional
user hook (``module:function``, text in, text out) to every string of the record's request,
response, choices and error, tool-call arguments included (they are strings of JSON). Ids,
model names, roles and other protocol fields are left alone. A record in which anything was
redacted loses its token ids and logprobs and is marked not token-level: the ids are those of
the text the model really saw, which is no longer stored, so transition building skips the call for
token-level training (text-level uses such as SFT exports still see the redacted text).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, cast

from fulmen.errors import ConfigError
from fulmen.gateway.capture_config import RedactionConfig
from fulmen.importing import import_object
from fulmen.types import LLMCallCreate, LLMChoice

__all__ = ["Redactor", "is_luhn_valid", "load_hook"]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
# International (+ and 7-15 digits) or 10+ digits with at least one separator or parentheses,
# so plain runs of digits (ids, amounts, timestamps) are not taken for phone numbers.
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d[\d ().-]{6,20}\d|\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4,6})(?![\w])"
)
# 13 to 19 digits, optionally grouped by spaces or dashes; kept only if the Luhn check passes.
_CARD = re.compile(r"(?<![\w])\d(?:[ -]?\d){12,18}(?![\w])")
# Every phone or card match lies inside such a run; the exact patterns run on runs alone, which
# is several times cheaper than scanning all the text with them.
_NUMBER_RUN = re.compile(r"[0-9+(][0-9 ().+-]{5,}[0-9]")
_PLACEHOLDER: Final = {"email": "[EMAIL]", "phone": "[PHONE]", "card": "[CARD]"}
# Protocol fields, never personal data; redacting them could break the record's meaning.
_KEPT_KEYS: Final = frozenset(
    {
        "id",
        "object",
        "model",
        "role",
        "type",
        "finish_reason",
        "tool_call_id",
        "call_id",
        "system_fingerprint",
        "status",
    }
)


def is_luhn_valid(digits: str) -> bool:
    """Whether the string of digits passes the Luhn checksum that card numbers carry."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if i % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", match.group())
    return _PLACEHOLDER["card"] if is_luhn_valid(digits) else match.group()


def load_hook(spec: str) -> Callable[[str], str]:
    """Import the ``module:function`` redaction hook, or raise ``ConfigError`` naming it."""
    target = import_object(spec, what="redaction hook")
    if not callable(target):
        raise ConfigError(f"redaction hook {spec!r} is not callable")
    return cast("Callable[[str], str]", target)


class Redactor:
    """Redacts the text of call records with the configured patterns and hook.

    Args:
        config: which built-in patterns run, and the hook.
        hook: the hook function itself (overrides ``config.hook``; for callers in Python).
    """

    def __init__(
        self, config: RedactionConfig, *, hook: Callable[[str], str] | None = None
    ) -> None:
        self._patterns = frozenset(config.patterns)
        self._hook = hook or (load_hook(config.hook) if config.hook else None)
        self._has_numbers = bool(self._patterns & {"card", "phone"})
        self.redacted_calls = 0

    def text(self, value: str) -> str:
        """Return ``value`` with every configured pattern replaced and the hook applied."""
        out = value
        if "email" in self._patterns and "@" in out:
            out = _EMAIL.sub(_PLACEHOLDER["email"], out)
        if self._has_numbers:
            out = _NUMBER_RUN.sub(self._numbers, out)
        if self._hook is not None:
            hooked = self._hook(out)
            if not isinstance(hooked, str):
                raise TypeError(f"redaction hook returned {type(hooked).__name__}, not str")
            out = hooked
        return out

    def _numbers(self, run: re.Match[str]) -> str:
        """Redact cards and phones inside one run of digits and separators.

        The patterns see the run with one character of context on each side, so their
        boundary checks read the real neighbours; no match can reach into that context (it is
        not a digit, and no match starts with a separator).
        """
        text = run.string
        lo, hi = max(run.start() - 1, 0), min(run.end() + 1, len(text))
        window = text[lo:hi]
        if "card" in self._patterns:
            window = _CARD.sub(_card, window)
        if "phone" in self._patterns:
            window = _PHONE.sub(_PLACEHOLDER["phone"], window)
        return window[run.start() - lo : len(window) - (hi - run.end())]

    def call(self, call: LLMCallCreate) -> LLMCallCreate:
        """Return ``call`` redacted; token ids and logprobs dropped if any text changed."""
        request = self._json(call.request)
        response = self._json(call.response) if call.response is not None else None
        error = self._json(call.error) if call.error is not None else None
        choices = [
            c.model_copy(update={"text": self.text(c.text)}) if c.text is not None else c
            for c in call.choices
        ]
        changed = (
            request != call.request
            or response != call.response
            or error != call.error
            or any(a.text != b.text for a, b in zip(choices, call.choices, strict=True))
        )
        if not changed:
            return call
        self.redacted_calls += 1
        return call.model_copy(
            update={
                "request": request,
                "response": _without_token_fields(response),
                "error": error,
                "choices": [_without_tokens(c) for c in choices],
                "prompt_token_ids": None,
                "is_token_level": False,
            }
        )

    def _json(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, str):
            return value if key in _KEPT_KEYS else self.text(value)
        if isinstance(value, dict):
            fields = cast("dict[str, Any]", value)
            return {k: self._json(v, k) for k, v in fields.items()}
        if isinstance(value, list):
            return [self._json(v, key) for v in cast("list[Any]", value)]
        return value


def _without_token_fields(response: dict[str, Any] | None) -> dict[str, Any] | None:
    """``response`` without token ids and logprobs (their tokens spell the unredacted text)."""
    if response is None:
        return None
    out = {k: v for k, v in response.items() if k != "prompt_token_ids"}
    choices = response.get("choices")
    if isinstance(choices, list):
        out["choices"] = [
            {k: (None if k == "logprobs" else v) for k, v in c.items() if "token_ids" not in k}
            if isinstance(c, dict)
            else c
            for c in cast("list[Any]", choices)
        ]
    return out


def _without_tokens(choice: LLMChoice) -> LLMChoice:
    return choice.model_copy(update={"token_ids": None, "logprobs": None})
