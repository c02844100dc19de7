"""The OpenAPI 3.1 description of the gateway's own surface.

The gateway forwards OpenAI-compatible requests, so this spec covers what the gateway itself
answers for: its control routes (``GET /healthz``, ``GET /metrics``, ``POST /gateway/flush``),
delayed rewards (``POST /v1/rewards``, stored in the gateway's store) and the model route of
every wire API it records (``fulmen.wire.table.wire_apis``: chat completions, completions,
Responses, Messages, and any an installed distribution adds), each untracked (``/v1/...``) and
tracked (``/rollout/{rollout_id}/attempt/{attempt_id}/v1/...``). Request and response bodies
belong to the engine behind it (a Responses or Messages call for a token-level engine is
translated by the gateway): the spec names the fields the gateway relies on and lets the others
through.
``docs/gateway-openapi.json`` is the committed copy (``python -m fulmen.gateway.openapi >
docs/gateway-openapi.json``); a test fails when they differ, and the contract tests fuzz a real
gateway against it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import TypeAdapter

from fulmen.gateway.routes import REWARDS_PATH, TRACKED, TRACKED_KEYED, UNTRACKED, spec_path
from fulmen.types import Reward, RewardCreate
from fulmen.version import __version__
from fulmen.wire.api import ApiSpec
from fulmen.wire.openai import OPENAI_SCHEMAS
from fulmen.wire.table import wire_apis

__all__ = ["build_gateway_openapi", "gateway_openapi_json"]

_REF = "#/components/schemas/{}"

_DESCRIPTION = """\
The fulmen gateway: an OpenAI-compatible proxy in front of inference engines that records every
call (token ids, logprobs) into the store. Agents use a per-attempt base URL,
`/rollout/{rollout_id}/attempt/{attempt_id}/v1` (or `.../attempt/{attempt_id}/key/{key}/v1`, the
attempt's key in the path); plain `/v1` records calls with no rollout. With a token, an attempt's
own key opens that attempt's routes and its own rewards only (403 otherwise), and only model API
paths reach an engine (404 otherwise). `POST /v1/rewards` stores a reward (also one that arrives
hours later) in the gateway's store.
Every error the gateway raises is OpenAI's error shape `{"error": {"message", "type", "param",
"code"}}`; an engine's own error answers are passed through as the engine sent them."""


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(name)}


def _reward_schemas() -> dict[str, Any]:
    """``RewardCreate`` (the body) and ``Reward`` (the answer), from the pydantic models."""
    modes: list[tuple[str, Literal["validation", "serialization"], TypeAdapter[Any]]] = [
        ("RewardCreate", "validation", TypeAdapter(RewardCreate)),
        ("Reward", "serialization", TypeAdapter(Reward)),
    ]
    _, definitions = TypeAdapter.json_schemas(modes, ref_template=_REF.replace("{}", "{model}"))
    return dict(definitions.get("$defs", {}))


def _schemas() -> dict[str, Any]:
    integer = {"type": "integer", "minimum": 0}
    schemas: dict[str, Any] = {
        "Health": {
            "type": "object",
            "description": (
                "Engines and counters for the token's holders (or a gateway without one); "
                "`status` alone for anyone else"
            ),
            "required": ["status"],
            "properties": {
                "status": {"const": "ok"},
                "upstreams": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["base_url", "in_flight"],
                        "properties": {"base_url": {"type": "string"}, "in_flight": integer},
                    },
                },
                "recorder": {
                    "type": "object",
                    "required": ["recorded", "stored", "dropped"],
                    "properties": {"recorded": integer, "stored": integer, "dropped": integer},
                },
            },
        },
        "Flushed": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"const": "flushed"}},
        },
        "FlushFailed": {
            "type": "object",
            "required": ["status", "refused", "pending", "error"],
            "properties": {
                "status": {"const": "failed"},
                "refused": integer,
                "pending": integer,
                "error": _ref("OpenAIErrorDetail"),
            },
        },
        "RewardHeld": {
            "type": "object",
            "required": ["status", "session_id"],
            "properties": {
                "status": {"enum": ["held", "not_kept"]},
                "session_id": {"type": "string"},
            },
        },
        **_reward_schemas(),
        **OPENAI_SCHEMAS,
    }
    for api in wire_apis():
        if api.spec is not None:
            schemas.update(api.spec.schemas)
    return dict(sorted(schemas.items()))


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error(description: str, schema: str = "OpenAIError") -> dict[str, Any]:
    return {"description": description, "content": _json(_ref(schema))}


def _model_operation(
    operation_id: str, spec: ApiSpec, *, tracked: bool, keyed: bool = False
) -> dict[str, Any]:
    def error(description: str) -> dict[str, Any]:
        return _error(description, spec.error)

    responses: dict[str, Any] = {
        "200": {"description": "The engine's answer", "content": _json(_ref(spec.reply))},
        "400": error(
            "The body is not a JSON object, names a field the gateway cannot serve, "
            "or the engine refused it"
        ),
        "401": error("Missing or wrong bearer token (when the gateway has one)"),
        "413": error("Request body above the gateway's limit"),
        "502": error("No engine could be reached, or it broke the reply"),
        "504": error("The engine did not answer in time"),
    }
    responses["403"] = error(
        "An attempt's key used outside its attempt: another attempt's route, an untracked "
        "call, or after its attempt ended"
    )
    parameters: list[dict[str, Any]] = []
    if tracked:
        responses["404"] = error("Unknown rollout or attempt, or the attempt is not the rollout's")
        responses["409"] = error("The attempt is final: its agent must stop calling")
        responses["429"] = error("The rollout already has max_calls_per_rollout calls in flight")
        names = ("rollout_id", "attempt_id", "key") if keyed else ("rollout_id", "attempt_id")
        parameters = [
            {
                "name": name,
                "in": "path",
                "required": True,
                "schema": {"type": "string", "minLength": 1, "maxLength": 128},
            }
            for name in names
        ]
    if tracked:
        where = ", its key in the path" if keyed else ""
        summary = f"{spec.summary} recorded on the attempt{where}"
    else:
        summary = f"{spec.summary} recorded with no rollout"
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "requestBody": {"required": True, "content": _json(_ref(spec.request))},
        "responses": dict(sorted(responses.items())),
        "security": [{"bearer": []}],
    }
    if parameters:
        operation["parameters"] = parameters
    return operation


def _rewards_operation() -> dict[str, Any]:
    """``POST /v1/rewards``: the store's reward route, answered by the gateway."""
    responses = {
        "200": {"description": "The stored reward", "content": _json(_ref("Reward"))},
        "202": {
            "description": (
                "With production capture: the reward's session is still in the gateway's "
                "memory and the reward is held with it (`held`), or the sample did not keep "
                "that session (`not_kept`)"
            ),
            "content": _json(_ref("RewardHeld")),
        },
        "400": _error("The body is not JSON"),
        "401": _error("Missing or wrong bearer token (when the gateway has one)"),
        "403": _error(
            "An attempt's key posting for another rollout, by response or session id, or "
            "after its attempt ended"
        ),
        "404": _error("No rollout, response or session has the id the reward names"),
        "409": _error("The key was used before with another value, target or metadata"),
        "413": _error("Request body above the gateway's limit"),
        "422": _error(
            "The body does not match RewardCreate, or a value is outside the gateway's "
            "reward_range; the message names the field"
        ),
        "502": _error("The store refused the reward"),
        "503": _error("The store is unreachable; retry with the same key"),
    }
    return {
        "operationId": "add_reward",
        "summary": "Store a delayed reward by rollout, response or session id (idempotent by key)",
        "description": (
            "The body of the store's `POST /v1/rewards`. A reward that names a `response_id` "
            "first waits until the call records answered so far are stored, so a reward sent "
            "right after the response finds its call. Posting the same `key` again returns the "
            "stored reward; transitions and exports use the latest reward by store sequence."
        ),
        "requestBody": {"required": True, "content": _json(_ref("RewardCreate"))},
        "responses": responses,
        "security": [{"bearer": []}],
    }


def build_gateway_openapi() -> dict[str, Any]:
    """Build the OpenAPI 3.1 document of the gateway as a JSON-ready dict."""
    flush_responses = {
        "200": {"description": "Every record so far is stored", "content": _json(_ref("Flushed"))},
        "401": _error("Missing or wrong bearer token (when the gateway has one)"),
        "502": {"description": "The store refused records", "content": _json(_ref("FlushFailed"))},
        "503": {
            "description": "The store stayed unreachable; records are still pending",
            "content": _json(_ref("FlushFailed")),
        },
    }
    paths: dict[str, Any] = {
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Liveness, engines in flight and recorder counts",
                "responses": {
                    "200": {"description": "Alive", "content": _json(_ref("Health"))},
                },
                "security": [],
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics: calls, latency, engines, recorder, refusals",
                "responses": {
                    "200": {
                        "description": "The metrics in Prometheus' text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": _error("Missing or wrong bearer token (when the gateway has one)"),
                    "403": _error("An attempt's key: metrics are the operators'"),
                },
                "security": [{"bearer": []}],
            }
        },
        "/gateway/flush": {
            "post": {
                "operationId": "flush",
                "summary": "Wait until every call record so far is stored",
                "responses": flush_responses,
                "security": [{"bearer": []}],
            }
        },
    }
    paths[REWARDS_PATH] = {"post": _rewards_operation()}
    for api in wire_apis():
        spec = api.spec
        if spec is None:
            continue
        name = spec.operation_id
        paths[spec_path(UNTRACKED, api.endpoint)] = {
            "post": _model_operation(f"{name}_untracked", spec, tracked=False)
        }
        for keyed, route, suffix in ((False, TRACKED, ""), (True, TRACKED_KEYED, "_keyed")):
            paths[spec_path(route, api.endpoint)] = {
                "post": _model_operation(f"{name}{suffix}", spec, tracked=True, keyed=keyed)
            }
    return {
        "openapi": "3.1.0",
        "info": {"title": "fulmen gateway", "version": __version__, "description": _DESCRIPTION},
        "paths": paths,
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def gateway_openapi_json() -> str:
    """Render the spec as ``docs/gateway-openapi.json`` holds it (2-space indent, final newline)."""
    return json.dumps(build_gateway_openapi(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(gateway_openapi_json())
