"""Importing an environment library on first use, with the install line when it is missing.

The libraries are optional extras (``pip install 'fulmen[reasoning-gym]'``, ...): nothing of
them is imported until a run uses its environment, and a missing one is a ``ConfigError``
that says which extra brings it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from fulmen.errors import ConfigError

__all__ = ["require"]


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module``; ``ConfigError`` naming ``fulmen[extra]`` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".", 1)[0]
        if exc.name is None or exc.name.split(".", 1)[0] != top:
            raise  # the library is there; something it imports is not: its own error says
        raise ConfigError(
            f"this environment needs the {top!r} package: pip install 'fulmen[{extra}]'"
        ) from exc
