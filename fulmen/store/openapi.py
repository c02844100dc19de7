"""The OpenAPI 3.1 description of the store service, generated from its route table.

``build_openapi()`` walks ``fulmen.store.routes.OPERATIONS`` and takes every schema from the
pydantic models, so the spec cannot drift from the code. ``docs/openapi.json`` is the committed
copy (``fulmen store openapi > docs/openapi.json``); a test fails when the two differ.
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaValue

from fulmen.store.base import Store
from fulmen.store.routes import OPERATIONS, PATH_PARAMETERS, Operation
from fulmen.store.wire import ErrorBody
from fulmen.version import __version__

__all__ = ["build_openapi", "openapi_json"]

_REF = "#/components/schemas/{model}"
_Mode = Literal["validation", "serialization"]

_DESCRIPTION = """\
The fulmen store over HTTP: rollouts, attempts, spans, LLM call records, resources and workers.
Each operation is one method of the `Store` interface (its operationId is the method name).
Every error is JSON `{"error", "code", "detail", "request_id"}`; `code` is stable (`not_found`,
`conflict`, `invalid_transition`, `invalid_request`, `payload_too_large`, `unauthorized`, ...);
a 4xx names the field and the rule, a 5xx only its `request_id`, which the server log holds
the details under. The store acknowledges only what it can read back: floats are finite,
integers fit their column, ids hold no NUL character. Writes are
idempotent by caller-chosen ids (`rollout_id`, `claim_id`, span ids, `call_id`,
`resources_id`), so clients may retry them."""

_ERRORS = {
    "400": "The body is not JSON",
    "401": "Missing or wrong bearer token",
    "404": "Unknown id or route",
    "409": "Conflicting write or refused lifecycle transition",
    "413": "Request body above the server's limit",
    "422": "The request does not match the schema; `detail` names the fields",
    "500": "Unexpected server error (logged by the server under the body's `request_id`)",
    "503": "The store's database is unavailable; retry later",
}


def _error_codes(op: Operation) -> list[str]:
    codes = ["500"]
    if not op.is_public:
        codes += ["401", "503"]
    if op.body is not None:
        # Bodies name rollouts, attempts and resources versions that may not exist.
        codes += ["400", "404", "413", "422"]
    if op.query is not None or "{" in op.path:
        codes += ["404", "422"]
    if op.method in ("POST", "PATCH"):
        codes.append("409")
    return sorted(set(codes))


def _parameters(op: Operation, query_schemas: dict[str, JsonSchemaValue]) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": PATH_PARAMETERS[name].json_schema(),
        }
        for name in re.findall(r"{(\w+)}", op.path)
    ]
    if op.query is not None:
        schema = query_schemas[op.name]
        required = set(schema.get("required", []))
        for name, prop in schema["properties"].items():
            params.append(
                {"name": name, "in": "query", "required": name in required, "schema": prop}
            )
    return params


def _operation(
    op: Operation,
    schemas: dict[tuple[str, _Mode], JsonSchemaValue],
    query_schemas: dict[str, JsonSchemaValue],
) -> dict[str, Any]:
    method = getattr(Store, op.name, None)
    doc = inspect.getdoc(method) if method is not None else None
    spec: dict[str, Any] = {"operationId": op.name, "summary": op.summary}
    if doc:
        spec["description"] = doc
    params = _parameters(op, query_schemas)
    if params:
        spec["parameters"] = params
    if op.body is not None:
        spec["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schemas[(op.name, "validation")]}},
        }
    responses: dict[str, Any] = {
        "200": {
            "description": "OK",
            "content": {"application/json": {"schema": schemas[(op.name, "serialization")]}},
        }
    }
    error_ref = {"$ref": _REF.format(model="ErrorBody")}
    for code in _error_codes(op):
        responses[code] = {
            "description": _ERRORS[code],
            "content": {"application/json": {"schema": error_ref}},
        }
    spec["responses"] = responses
    spec["security"] = [] if op.is_public else [{"bearer": []}]
    return spec


def build_openapi() -> dict[str, Any]:
    """Build the OpenAPI 3.1 document of the store service as a JSON-ready dict."""
    inputs: list[tuple[str, _Mode, TypeAdapter[Any]]] = []
    for op in OPERATIONS:
        inputs.append((op.name, "serialization", TypeAdapter(op.response)))
        if op.body is not None:
            inputs.append((op.name, "validation", TypeAdapter(op.body)))
    inputs.append(("ErrorBody", "serialization", TypeAdapter(ErrorBody)))
    by_key, definitions = TypeAdapter.json_schemas(inputs, ref_template=_REF)
    schemas: dict[tuple[str, _Mode], JsonSchemaValue] = {
        (name, "validation" if mode == "validation" else "serialization"): schema
        for (name, mode), schema in by_key.items()
    }
    # Query strings are flat: inline their fields as parameters instead of referencing a model.
    query_schemas = {op.name: op.query.model_json_schema() for op in OPERATIONS if op.query}
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, schemas, query_schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "fulmen store", "version": __version__, "description": _DESCRIPTION},
        "paths": paths,
        "components": {
            "schemas": dict(sorted(definitions.get("$defs", {}).items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def openapi_json() -> str:
    """Render the spec as ``docs/openapi.json`` holds it (2-space indent, final newline)."""
    return json.dumps(build_openapi(), indent=2, ensure_ascii=False) + "\n"
