"""Which request fields change the sampled distribution: the one rule for the behaviour policy.

GRPO divides the trainer's probability of each sampled token by the probability the engine
recorded. The trainer computes ``log_softmax(logits / temperature)``; the engines record the
distribution they sampled from (``processed_logprobs``). The two agree only when nothing but
the temperature shaped that distribution. This module says, for every engine fulmen serves
(the built-in engine and vLLM), which request fields do more than that:

- :data:`DISTRIBUTION_FIELDS` reshape or truncate the distribution and have a value that leaves
  it alone (the first of each entry). In a mode that samples the behaviour policy
  (``LLMResource.behaviour_modes``) the gateway sends each of them at that value on every call,
  whatever the agent sent, and also when the agent sent nothing: vLLM fills a field a request
  leaves unset from the model's ``generation_config.json`` (Gemma 3: ``top_k`` 64, ``top_p``
  0.95), so only an explicit value is neutral there.
- :data:`CONSTRAINT_FIELDS` constrain decoding (structured output, guided decoding, token
  bans, forced tool calls) and have no value to force that keeps the agent's request
  meaningful. A call that sets one to anything but the values listed is refused (400, naming
  the field) in those modes. ``text.format`` is the Responses API's ``response_format``.

``temperature`` is neither: it is the behaviour policy itself, set by the mode's sampling.
:func:`off_behaviour_reason` applies the same rule to a recorded request, for training on
traffic the gateway did not shape (offline GRPO).

>>> forced_fields()["top_k"]
-1
>>> refused_field({"model": "m", "response_format": {"type": "json_object"}})
'response_format'
>>> off_behaviour_reason({"temperature": 1.0, "top_p": 0.9}, temperature=1.0)
'top_p=0.9 truncates or reshapes the sampled distribution'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

__all__ = [
    "CONSTRAINT_FIELDS",
    "DISTRIBUTION_FIELDS",
    "forced_fields",
    "is_neutral",
    "off_behaviour_reason",
    "refused_field",
    "reshaped_fields",
]

#: Request fields that reshape the sampled distribution, with the values that leave it alone;
#: the first is the one the gateway sends in behaviour modes (``top_k: -1`` is vLLM's "off",
#: which the built-in engine accepts too; ``logit_bias: null`` is "none" for both).
DISTRIBUTION_FIELDS: Mapping[str, tuple[Any, ...]] = {
    "top_p": (1.0, 1),
    "top_k": (-1, 0),
    "min_p": (0.0, 0),
    "presence_penalty": (0.0, 0),
    "frequency_penalty": (0.0, 0),
    "repetition_penalty": (1.0, 1),
    "logit_bias": (None, {}),
}

#: Request fields that constrain decoding, with the values that do not (a field left out, or
#: ``null``, does not either). Dotted names are nested (``text.format`` of a Responses call).
CONSTRAINT_FIELDS: Mapping[str, tuple[Any, ...]] = {
    "response_format": ({"type": "text"},),
    "text.format": ({"type": "text"},),
    # vLLM decodes "required" and a named function with a JSON-schema grammar.
    "tool_choice": ("auto", "none"),
    "structured_outputs": (),
    "guided_json": (),
    "guided_regex": (),
    "guided_choice": (),
    "guided_grammar": (),
    "allowed_token_ids": (),
    "bad_words": ((),),
    "min_tokens": (0,),
    "logits_processors": ((),),
    "use_beam_search": (False,),
}


def forced_fields() -> dict[str, Any]:
    """Return the request fields sent on every call of a behaviour mode (a fresh dict)."""
    return {name: neutral[0] for name, neutral in DISTRIBUTION_FIELDS.items()}


def is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    """Whether ``value`` is one of ``neutral`` (``true`` is not ``1``, ``[]`` is ``()``)."""
    if isinstance(value, list):
        value = tuple(cast("list[Any]", value))
    return any(
        value == allowed and isinstance(value, bool) == isinstance(allowed, bool)
        for allowed in neutral
    )


def reshaped_fields(body: Mapping[str, Any]) -> list[str]:
    """Return the distribution fields ``body`` sets to a value that changes the distribution."""
    return [
        name
        for name, neutral in DISTRIBUTION_FIELDS.items()
        if body.get(name) is not None and not is_neutral(body[name], neutral)
    ]


def refused_field(body: Mapping[str, Any]) -> str | None:
    """Return the first constraint field ``body`` sets (dotted for a nested one), or ``None``."""
    for name, neutral in CONSTRAINT_FIELDS.items():
        value = _value_at(body, name)
        if value is not None and not is_neutral(value, neutral):
            return name
    return None


def off_behaviour_reason(request: Mapping[str, Any], *, temperature: float) -> str | None:
    """Say why ``request`` was not sampled from ``softmax(logits / temperature)``, if it was not.

    ``request`` is the body the engine received (for a call the gateway shaped, the agent's
    request with the rollout's sampling fields applied). A field left out or ``null`` counts
    as neutral and a missing ``temperature`` as 1, as the OpenAI API and fulmen's built-in
    engine read them; a vLLM serving a model whose ``generation_config.json`` sets sampling
    defaults did not sample such a request neutrally, and no record can show it.

    Returns ``None`` for a request sampled from that distribution, else a short reason that
    names the field.
    """
    sent = request.get("temperature")
    sent = 1.0 if sent is None else sent
    if (
        isinstance(sent, bool)
        or not isinstance(sent, int | float)
        or not math.isclose(sent, temperature, rel_tol=1e-6)
    ):
        return f"temperature={sent!r} differs from the trainer's {temperature!r}"
    reshaped = reshaped_fields(request)
    if reshaped:
        name = reshaped[0]
        return f"{name}={request[name]!r} truncates or reshapes the sampled distribution"
    refused = refused_field(request)
    if refused is not None:
        return f"{refused}={_value_at(request, refused)!r} constrains decoding"
    return None


def _value_at(body: Mapping[str, Any], name: str) -> Any:
    """Return the value of a possibly dotted field name, ``None`` when any part is missing."""
    value: Any = body
    for part in name.split("."):
        if not isinstance(value, Mapping):
            return None
        value = cast("Mapping[str, Any]", value).get(part)
    return value
