"""Building a model from values that are already valid, without running validation again.

For hot paths whose values were checked where they were made (a stored record from its
validated create form, a call record from JSON that orjson parsed): pydantic's
``model_construct`` handles defaults and aliases field by field and costs about as much as the
record's other work together; this sets the instance's state in one step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["assembled"]

M = TypeVar("M", bound=BaseModel)


def assembled(model: type[M], values: dict[str, Any], fields_set: Iterable[str] | None = None) -> M:
    """Return a ``model`` holding ``values``, which name every field of it and nothing else.

    The values are taken as they are (no validation, no copies): only for values known to be
    valid. ``fields_set`` is what ``model_fields_set`` reports (``None``: every field).
    """
    if values.keys() != model.model_fields.keys():
        missing = sorted(model.model_fields.keys() - values.keys())
        extra = sorted(values.keys() - model.model_fields.keys())
        raise TypeError(f"{model.__name__} needs every field: missing {missing}, extra {extra}")
    names = set(values if fields_set is None else fields_set)
    instance = model.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", names)
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance
