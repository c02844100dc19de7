"""Importing a ``PromptTemplate`` an agent ships (``"module:attribute"``) as a starting prompt."""

from __future__ import annotations

import importlib

from fulmen.errors import ConfigError
from fulmen.types import PromptTemplate

__all__ = ["import_prompt"]


def import_prompt(spec: str, *, option: str = "algorithm.initial") -> PromptTemplate:
    """Import the ``PromptTemplate`` that ``spec`` (``"module:attribute"``) names.

    Raises ``ConfigError`` naming ``option`` and ``spec`` when it cannot be imported or is not a
    ``PromptTemplate``.
    """
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ConfigError(f"{option} must look like 'module:attribute', got {spec!r}")
    try:
        value: object = importlib.import_module(module_name)
        for part in attr_path.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import {option} {spec!r}: {exc}") from exc
    if not isinstance(value, PromptTemplate):
        raise ConfigError(
            f"{option} {spec!r} is a {type(value).__name__}, not a fulmen PromptTemplate"
        )
    return value
