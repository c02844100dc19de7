"""The judge's answers kept on disk by content hash, so the same question is asked once.

The key is the SHA-256 of the judge call's request as sent (endpoint, model, sampling and the
messages, which hold the rubric or ranking prompt and the rollouts' content): the same content
judged by the same model with the same prompt hits; any change misses. Only parsed, valid
answers are kept. The file is JSON lines (``{"key": ..., "value": ...}``), appended as answers
arrive; a line a killed run left half-written is skipped when it is read back.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fulmen.types.limits import JsonData

__all__ = ["JudgeCache", "request_key"]


def request_key(base_url: str, request: dict[str, Any]) -> str:
    """Return the cache key of a judge request sent to ``base_url``: a SHA-256 hex digest."""
    canonical = json.dumps(
        {"base_url": base_url.rstrip("/"), "request": request},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class JudgeCache:
    """Parsed judge answers by request key, in memory and in the JSON lines file ``path``.

    Args:
        path: the file (created with its directory on the first ``put``); ``None`` keeps the
            answers in memory only.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, JsonData] | None = None

    def _load(self) -> dict[str, JsonData]:
        if self._entries is None:
            self._entries = {}
            if self.path is not None and self.path.exists():
                for line in self.path.read_text(encoding="utf-8").splitlines():
                    try:
                        entry = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by a killed run
                    if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                        self._entries[entry["key"]] = entry.get("value")
        return self._entries

    def get(self, key: str) -> JsonData | None:
        """Return the answer kept under ``key`` (``None``: not asked yet)."""
        return self._load().get(key)

    def put(self, key: str, value: JsonData) -> None:
        """Keep ``value`` under ``key`` and append it to the file."""
        self._load()[key] = value
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            line = json.dumps({"key": key, "value": value}, ensure_ascii=False)
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line + "\n")

    def __len__(self) -> int:
        return len(self._load())
