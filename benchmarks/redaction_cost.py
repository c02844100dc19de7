"""CPU the gateway's redaction costs per call record, against scanning all text with the patterns.

Builds one chat record of a support conversation (system prompt, user message, reply: about
9,400 characters with dates, amounts and order numbers, no personal data) and one with an
e-mail address in it, and times ``Redactor.call`` on each in this process; the same-run
baseline is the exact patterns applied to every string of the record over the whole text
(what redaction did before it scanned only runs of digits). Prints one JSON line.

    python benchmarks/redaction_cost.py [--repeat 300]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from fulmen.gateway import redaction
from fulmen.gateway.capture_config import RedactionConfig
from fulmen.gateway.redaction import Redactor
from fulmen.types import LLMCallCreate, LLMChoice

TEXT = (
    "The customer wrote about order 12345 and their account, asking for a refund of 42.50 "
    "on the invoice dated 2026-11-22 (ticket 8812-44). "
) * 18


def record(extra: str = "") -> LLMCallCreate:
    messages: Any = [
        {"role": "system", "content": TEXT},
        {"role": "user", "content": TEXT + extra},
    ]
    reply: Any = {"index": 0, "message": {"role": "assistant", "content": TEXT}}
    return LLMCallCreate(
        call_id="call-1",
        request={"model": "m", "messages": messages},
        response={"id": "chatcmpl-1", "choices": [reply]},
        prompt_token_ids=list(range(1000)),
        choices=[LLMChoice(text=TEXT, token_ids=list(range(300)), logprobs=[-0.1] * 300)],
        is_token_level=True,
        started_at=1.0,
    )


class WholeTextRedactor(Redactor):
    """The baseline: ``Redactor`` with every pattern run over every whole string."""

    def text(self, value: str) -> str:
        """Return ``value`` with the three patterns applied to all of it."""
        if "@" in value:
            value = redaction._EMAIL.sub("[EMAIL]", value)  # pyright: ignore[reportPrivateUsage]
        value = redaction._CARD.sub(redaction._card, value)  # pyright: ignore[reportPrivateUsage]
        return redaction._PHONE.sub("[PHONE]", value)  # pyright: ignore[reportPrivateUsage]


def per_call_ms(fn: Any, arg: Any, repeat: int) -> float:
    fn(arg)
    start = time.process_time()
    for _ in range(repeat):
        fn(arg)
    return round((time.process_time() - start) / repeat * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    redactor = Redactor(RedactionConfig())
    baseline = WholeTextRedactor(RedactionConfig())
    clean, personal = record(), record(" Write to me at jane.doe@example.org, +44 20 7946 0958.")
    chars = len(TEXT) * 4  # system, user, the reply's message and its choice text
    out = {
        "benchmark": "redaction_cost",
        "chars_per_record": chars,
        "redactor_ms_clean": per_call_ms(redactor.call, clean, args.repeat),
        "redactor_ms_personal": per_call_ms(redactor.call, personal, args.repeat),
        "whole_text_ms_clean": per_call_ms(baseline.call, clean, args.repeat),
        "whole_text_ms_personal": per_call_ms(baseline.call, personal, args.repeat),
        "personal_redacted": "jane.doe" not in redactor.call(personal).model_dump_json(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
