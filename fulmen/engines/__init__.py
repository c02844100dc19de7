"""Inference engines: the built-in transformers server, the vLLM launcher, and model loading.

Nothing heavy is imported here: torch, transformers and starlette load only inside the
submodules that need them, so ``import fulmen.engines`` stays cheap.
"""

from __future__ import annotations

__all__: list[str] = []
