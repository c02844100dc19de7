"""The UNSET sentinel: "leave this field as it is", distinct from an explicit ``None``."""

from __future__ import annotations

from enum import Enum
from typing import Final, Literal, TypeAlias

__all__ = ["UNSET", "Unset", "UnsetType"]


class UnsetType(Enum):
    """Type of the single ``UNSET`` value used by partial updates."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final = UnsetType.UNSET
Unset: TypeAlias = Literal[UnsetType.UNSET]
