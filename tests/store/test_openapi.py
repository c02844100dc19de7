"""The OpenAPI spec: generated from the route table, committed, and complete."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from fulmen.store.base import Store
from fulmen.store.openapi import build_openapi, openapi_json
from fulmen.store.routes import OPERATIONS

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_committed_spec_is_up_to_date() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == openapi_json(), (
        "docs/openapi.json is stale: run `fulmen store openapi > docs/openapi.json`"
    )


def test_every_store_method_is_an_operation() -> None:
    methods = {
        name
        for name, member in inspect.getmembers(Store)
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }
    served = {op.name for op in OPERATIONS}
    assert methods - {"aclose"} <= served, methods - served
    assert served - methods == {"info", "health"}


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


def test_spec_is_well_formed() -> None:
    spec = build_openapi()
    assert spec["openapi"] == "3.1.0"
    schemas = spec["components"]["schemas"]
    for ref in _refs(spec):
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[1] in schemas, ref
    operation_ids = [op["operationId"] for path in spec["paths"].values() for op in path.values()]
    assert len(operation_ids) == len(set(operation_ids)) == len(OPERATIONS)
    claim = spec["paths"]["/v1/rollouts/claim"]["post"]
    assert claim["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ClaimRequest"
    }
    assert set(claim["responses"]) >= {"200", "401", "413", "422"}
    assert spec["paths"]["/v1/info"]["get"]["security"] == []
    json.dumps(spec)  # plain JSON all the way down


def test_spec_states_what_the_server_enforces() -> None:
    spec = build_openapi()
    (version,) = spec["paths"]["/v1/resources/{version}"]["get"]["parameters"]
    assert version["schema"] == {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
    (rollout_id,) = spec["paths"]["/v1/rollouts/{rollout_id}"]["get"]["parameters"]
    assert rollout_id["schema"]["maxLength"] == 128
    assert rollout_id["schema"]["pattern"] == "^[^\\u0000]*$"
    schemas = spec["components"]["schemas"]
    # The discriminated union refuses a resource without ``kind``: the spec says so.
    assert "kind" in schemas["LLMResource"]["required"]
    assert "kind" in schemas["PromptTemplate"]["required"]
    config = schemas["RolloutConfig"]["properties"]
    assert config["heartbeat_timeout_s"]["type"] == "number"
    assert "request_id" in schemas["ErrorBody"]["required"]
    # Bodies name records that may not exist (enqueue with a resources version, spans of an
    # unknown rollout): 404 is documented there, and 503 wherever the database is used.
    for path, method in [("/v1/rollouts", "post"), ("/v1/spans", "post"), ("/v1/stats", "get")]:
        responses = spec["paths"][path][method]["responses"]
        assert "503" in responses
        assert method == "get" or "404" in responses
