"""The rules for the plain arguments of ``Store`` methods, shared by every backend.

Wire models (``fulmen.types``, ``fulmen.store.wire``) validate what arrives as a model; a few
``Store`` methods also take plain strings and dicts that end up in columns (a worker id, a
claim id, an attempt's error text, metadata). Every backend checks them here, with the same
rules as the wire types, so an in-process memory store refuses exactly what PostgreSQL
cannot hold and the HTTP service refuses.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from fulmen.errors import InvalidRequest
from fulmen.types.limits import Id, JsonData, Text, WorkerId

__all__ = ["check_arguments"]

_RULES: Final[dict[str, TypeAdapter[Any]]] = {
    "worker_id": TypeAdapter(WorkerId),
    "claim_id": TypeAdapter(Id | None),
    "attempt_ids": TypeAdapter(list[Id]),
    "error": TypeAdapter(Text | None),
    "metadata": TypeAdapter(dict[str, JsonData] | None),
}


def check_arguments(**arguments: Any) -> None:
    """Raise ``InvalidRequest`` naming the first argument that breaks its rule.

    Each keyword is an argument name from the rules above and its value; pass only the
    arguments that were given (``UNSET`` ones are not checked).
    """
    for name, value in arguments.items():
        try:
            _RULES[name].validate_python(value)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            detail = [
                {"loc": [name, *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in errors
            ]
            raise InvalidRequest(
                f"invalid argument {name}: {errors[0]['msg']}", detail=detail
            ) from None
