"""Validating what a dashboard request carries: query parameters or a JSON body, into a model.

A bad value is an ``InvalidRequest`` (422) naming the field, the reason and what was given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ValidationError

from fulmen.errors import InvalidRequest

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["json_body", "validated"]


def validated(model: type[BaseModel], raw: Any) -> Any:
    """Return ``raw`` validated as ``model``; ``InvalidRequest`` names the first bad field."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidRequest(
            f"invalid {where}: {first['msg']} (got {str(first.get('input'))[:80]!r})",
            detail={"loc": list(first["loc"]), "msg": first["msg"]},
        ) from None


async def json_body(model: type[BaseModel], request: Request) -> Any:
    """Return the request's JSON body validated as ``model`` (``InvalidRequest`` if not JSON)."""
    try:
        raw = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    return validated(model, raw)
