"""The model API paths the gateway forwards: an allowlist, not a blocklist.

An engine serves more than the model API: the built-in engine and vLLM load and unload LoRA
adapters and reload weights over HTTP, and expose tokenizer, health and metrics routes. The
gateway forwards only the paths an agent's client needs (``docs/security.md``), so an agent
being trained can never reach the engine's admin routes through its model URL; anything else
below ``/v1`` is answered 404 without reaching an engine.
"""

from __future__ import annotations

import re

__all__ = ["is_model_path"]

# Whole paths below /v1, by method. Recorded model calls are POSTs of the first four.
_EXACT: dict[str, frozenset[str]] = {
    "POST": frozenset(
        {
            "chat/completions",
            "completions",
            "responses",
            "messages",
            "messages/count_tokens",  # Anthropic clients size their prompts with it
            "embeddings",  # hosted upstreams of production traffic
        }
    ),
    "GET": frozenset({"models"}),
}
# An id segment: no slash, no dot-segment, no percent-escape (nothing an upstream could decode
# into another path).
_ID = r"[A-Za-z0-9_\-:][A-Za-z0-9_\-:.]*"
_PATTERNS: dict[str, re.Pattern[str]] = {
    "GET": re.compile(rf"models/{_ID}|responses/{_ID}(?:/input_items)?"),
    "DELETE": re.compile(rf"responses/{_ID}"),
}


def is_model_path(method: str, endpoint: str) -> bool:
    """Whether the gateway forwards ``method`` on ``endpoint`` (the path below ``/v1``)."""
    if endpoint in _EXACT.get(method, ()):
        return True
    pattern = _PATTERNS.get(method)
    return pattern is not None and pattern.fullmatch(endpoint) is not None
