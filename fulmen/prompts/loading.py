"""Importing a ``PromptTemplate`` an agent ships (``"module:attribute"``) as a starting prompt."""

from __future__ import annotations

from fulmen.errors import ConfigError
from fulmen.importing import import_object
from fulmen.types import PromptTemplate

__all__ = ["import_prompt"]


def import_prompt(spec: str, *, option: str = "algorithm.initial") -> PromptTemplate:
    """Import the ``PromptTemplate`` that ``spec`` (``"module:attribute"``) names.

    Raises ``ConfigError`` naming ``option`` and ``spec`` when it cannot be imported or is not a
    ``PromptTemplate``.
    """
    value = import_object(spec, what=option)
    if not isinstance(value, PromptTemplate):
        raise ConfigError(
            f"{option} {spec!r} is a {type(value).__name__}, not a fulmen PromptTemplate"
        )
    return value
