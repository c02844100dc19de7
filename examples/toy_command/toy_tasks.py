"""The toy task's prompts (the same as ``examples/toy``): write the letter ``a``."""

from __future__ import annotations

from typing import Any


def train_tasks() -> list[dict[str, Any]]:
    """64 prompts that differ in wording (so groups differ), all asking for the letter."""
    return [{"id": f"t{i}", "prompt": f"Task {i}: write the letter a."} for i in range(64)]


def val_tasks() -> list[dict[str, Any]]:
    """16 held-out prompts."""
    return [{"id": f"v{i}", "prompt": f"Check {i}: write the letter a."} for i in range(16)]
