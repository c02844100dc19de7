"""fulmen: train any LLM agent from its own runs.

Public names are imported lazily so that ``import fulmen`` stays fast: the store backends,
HTTP stacks and (later) torch load only when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "open_store"]

# public name → module that defines it
_LAZY: dict[str, str] = {
    "open_store": "fulmen.store",
}

if TYPE_CHECKING:
    from fulmen.store import open_store


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fulmen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
