"""The model API paths the gateway forwards: an allowlist, not a blocklist.

An engine serves more than the model API: the built-in engine and vLLM load and unload LoRA
adapters and reload weights over HTTP, and expose tokenizer, health and metrics routes. The
gateway forwards only the paths an agent's client needs (``docs/security.md``): each wire API's
endpoint and the paths it declares (``fulmen.wire.table.forwarded_paths``), so an agent being
trained can never reach the engine's admin routes through its model URL; anything else below
``/v1`` is answered 404 without reaching an engine.
"""

from __future__ import annotations

from fulmen.wire.table import forwarded_paths

__all__ = ["is_model_path"]


def is_model_path(method: str, endpoint: str) -> bool:
    """Whether the gateway forwards ``method`` on ``endpoint`` (the path below ``/v1``)."""
    exact, patterns = forwarded_paths()
    if endpoint in exact.get(method, ()):
        return True
    pattern = patterns.get(method)
    return pattern is not None and pattern.fullmatch(endpoint) is not None
