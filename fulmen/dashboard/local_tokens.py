"""Token texts from the run's own tokenizer on this machine, when no engine can name them.

After a run the engine is gone, and the rollout page would show token ids (``#782``). The
run's record in the store names its model (``config.model``); when that model is on this
machine (a built-in name already built, or a directory) its tokenizer decodes the ids. Nothing
is downloaded or built here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fulmen.engines.models import cached_model
from fulmen.store.roles import RunLog

__all__ = ["LocalTokens"]


class LocalTokens:
    """Decodes token ids with the tokenizer of the newest run's model, loaded once."""

    def __init__(self, store: RunLog) -> None:
        self._store = store
        self._tokenizers: dict[str, Any] = {}  # model -> tokenizer, or None when unavailable

    async def model(self) -> str | None:
        """Return the model the newest run of the store trained (``config.model``), if any."""
        runs = (await self._store.list_runs(limit=1)).items
        model = runs[0].config.get("model") if runs else None
        return model if isinstance(model, str) and model else None

    async def texts(self, ids: Sequence[int]) -> tuple[dict[int, str], str | None]:
        """Return each id's text and the model whose tokenizer gave them (``None``: none)."""
        model = await self.model()
        if model is None:
            return {}, None
        if model not in self._tokenizers:
            self._tokenizers[model] = await asyncio.to_thread(_load, model)
        tokenizer = self._tokenizers[model]
        if tokenizer is None:
            return {}, None
        size = len(tokenizer)
        return {i: tokenizer.decode([i]) for i in set(ids) if 0 <= i < size}, model


def _load(model: str) -> Any:
    path = cached_model(model)
    if path is None:
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:  # the dashboard runs without the train extra too
        return None
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError):
        return None
