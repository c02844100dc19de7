"""Import the object a ``"package.module:attribute"`` string names, for config values and options.

Agents, task factories, prompts, reward functions, hooks: users name them all the same way, and a
name that cannot be imported should fail the same way, as a ``ConfigError`` that names the option.
"""

from __future__ import annotations

import importlib
from typing import Any

from fulmen.errors import ConfigError

__all__ = ["import_object"]


def import_object(spec: str, *, what: str) -> Any:
    """Import the object ``spec`` (``"package.module:attr.path"``) names.

    ``what`` names the option in the errors: ``ConfigError`` when ``spec`` is not of that shape
    or its module or attribute cannot be imported.
    """
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ConfigError(f"{what} must look like 'module:attribute', got {spec!r}")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr_path.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import {what} {spec!r}: {exc}") from exc
    return value
