"""Calling a store operation over HTTP by its name in the route table.

``StoreClient`` and ``RunsOverHttp`` name the ``Store`` method (``fulmen.store.routes.OPERATIONS``)
instead of spelling its HTTP method, path and response type again: the server's routes, the
OpenAPI spec and the client read the same row.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter

from fulmen.store.routes import OPERATIONS, Operation
from fulmen.types import UNSET

__all__ = ["OperationCalls", "given_fields"]

_OPERATIONS: dict[str, Operation] = {op.name: op for op in OPERATIONS}
_RESPONSES: dict[str, TypeAdapter[Any]] = {
    op.name: TypeAdapter(op.response) for op in OPERATIONS if op.response is not None
}


class OperationCalls:
    """``_call(name, ...)``: one ``Store`` operation as an HTTP request through ``_send``."""

    _send: Callable[..., Awaitable[bytes]]

    async def _call(
        self,
        name: str,
        body: BaseModel | None = None,
        *,
        path: Mapping[str, object] | None = None,
        params: Mapping[str, Any] | None = None,
        **send: Any,
    ) -> Any:
        """Send operation ``name`` (path parameters in ``path``); return its parsed response.

        ``send`` passes ``_send``'s own options on (``recover``, ``partial``,
        ``extra_timeout``). An operation without a response model returns ``None``.
        """
        operation = _OPERATIONS[name]
        url = operation.path.format(**{k: quote(str(v), safe="") for k, v in (path or {}).items()})
        args: dict[str, Any] = dict(send)
        if params is not None:
            args["params"] = params
        raw = await self._send(operation.method, url, body, **args)
        response = _RESPONSES.get(name)
        return None if response is None else response.validate_json(raw)


def given_fields(**fields: Any) -> dict[str, Any]:
    """Return the fields of a partial update that were given (not ``UNSET``)."""
    return {name: value for name, value in fields.items() if value is not UNSET}
