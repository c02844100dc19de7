"""Importing an example's modules in a test the way ``fulmen train`` does, then forgetting them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

__all__ = ["EXAMPLES", "example_modules"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@contextmanager
def example_modules(example: str, *names: str) -> Iterator[tuple[ModuleType, ...]]:
    """Import ``names`` from ``examples/EXAMPLE`` with that folder on ``sys.path``.

    Afterwards the folder leaves ``sys.path`` and every module imported from it leaves
    ``sys.modules``, so two examples' modules never meet in one test process.
    """
    folder = EXAMPLES / example
    sys.path.insert(0, str(folder))
    try:
        yield tuple(importlib.import_module(name) for name in names)
    finally:
        sys.path.remove(str(folder))
        for name, module in list(sys.modules.items()):
            if Path(getattr(module, "__file__", None) or "/").parent == folder:
                del sys.modules[name]
