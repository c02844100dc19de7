"""Records built without validation (``build_call``) are records validation would accept.

``build_call`` assembles ``LLMCallCreate`` with ``model_construct``: its inputs are JSON that
orjson parsed (agents' bodies, engines' replies) plus values the gateway made. Property test:
for hostile JSON pushed through orjson as the gateway does, and engine-shaped replies with
wrong types in every token-level field, the built record validates to itself and survives a
JSON round trip (what the SQL and HTTP backends do with it).
"""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fulmen.gateway.capture import Asked, Exchange, agent_view, build_call
from fulmen.types import LLMCallCreate
from fulmen.wire.openai import CHAT, COMPLETIONS

# Strings a text column cannot hold (NUL) or that are easy to mangle, and any other text.
_strings = st.one_of(
    st.sampled_from(["\x00", "a\x00b", "é", "\u2028", ""]),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
)
# Numbers as JSON text can hold them: bools, integers wider than 64 bits, any finite float.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    _strings,
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_token_ids = st.one_of(_json, st.lists(st.integers(min_value=-(2**66), max_value=2**66)))
_logprob_values = st.one_of(_json, st.lists(st.one_of(st.floats(-1e308, 0), st.integers())))


@st.composite
def _engine_reply(draw: st.DrawFn, endpoint: str) -> Any:
    """A reply shaped like a token-level engine's, with any field possibly of a wrong type."""
    values = draw(_logprob_values)
    if endpoint == CHAT:
        entries = [{"logprob": v} for v in values] if isinstance(values, list) else values
        choice = {
            "index": draw(_json),
            "message": draw(st.one_of(_json, st.fixed_dictionaries({"content": _json}))),
            "logprobs": {"content": entries},
        }
    else:
        choice = {"index": draw(_json), "text": draw(_json), "logprobs": {"token_logprobs": values}}
    choice |= {"token_ids": draw(_token_ids), "finish_reason": draw(_json)}
    extra = draw(st.dictionaries(st.text(max_size=6), _json, max_size=3))
    return extra | {
        "id": draw(st.one_of(_strings, _json)),
        "model": draw(st.one_of(_strings, _json)),
        "policy_version": draw(st.one_of(_strings, _json)),
        "prompt_token_ids": draw(_token_ids),
        "choices": draw(st.one_of(st.just([choice]), st.lists(_json, max_size=2))),
        "usage": draw(_json),
        "error": draw(st.one_of(st.none(), _json)),
    }


def _through_orjson(value: Any) -> Any:
    """``value`` as the gateway holds it: written as JSON text, parsed by orjson."""
    text = json.dumps(value)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        assume(False)  # the gateway answers such a body 400 and records nothing


# The same examples on every run (no random seed, no example database): CI never flakes.
@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    endpoint=st.sampled_from([CHAT, COMPLETIONS]),
    data=st.data(),
    request=st.fixed_dictionaries(
        {}, optional={"model": st.one_of(_strings, _json), "messages": _json}
    ).flatmap(lambda d: st.dictionaries(st.text(max_size=8), _json, max_size=3).map(d.__or__)),
    asked=st.builds(Asked, st.booleans(), st.booleans(), st.booleans()),
    agent=st.one_of(st.none(), st.text(min_size=1, max_size=256)),
    version_header=st.one_of(st.none(), st.text(max_size=8)),
)
def test_a_built_record_validates_to_itself(
    endpoint: str,
    data: st.DataObject,
    request: dict[str, Any],
    asked: Asked,
    agent: str | None,
    version_header: str | None,
) -> None:
    reply = _through_orjson(data.draw(_engine_reply(endpoint)))
    body = _through_orjson(request)
    exchange = Exchange(
        call_id="call-1",
        rollout_id="ro-1",
        attempt_id="at-1",
        endpoint=endpoint,
        request=body,
        response=reply,
        upstream="http://127.0.0.1:8000/v1",
        is_stream=False,
        started_at=time.time(),
        latency_s=0.01,
        policy_version=version_header,
        shown=agent_view(reply, asked),
        agent_name=agent,
    )
    call = build_call(exchange)
    # JSON text, not Python equality, is compared: ``True == 1`` would hide a bool in an int.
    text = call.model_dump_json()
    assert LLMCallCreate.model_validate(call.model_dump()).model_dump_json() == text
    assert LLMCallCreate.model_validate_json(text).model_dump_json() == text
