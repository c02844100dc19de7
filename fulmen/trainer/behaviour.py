"""The behaviour policy of training rollouts: one temperature, no truncation.

GRPO's importance ratio divides the trainer's probability of each sampled token by the
probability the engine sampled it with. The engines record logprobs of the distribution they
sampled from (``logits / temperature``, after any top-k / top-p), and the trainer recomputes
``log_softmax(logits / temperature)``; the two agree only when both use the same temperature
and nothing truncates the distribution. :func:`align_behaviour_temperature` makes a raw
training config say so: ``rollouts.train_sampling.temperature`` and
``algorithm.grpo.temperature`` are one setting (either derives the other; different values are
an error), and sampling fields the trainer cannot reproduce are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from pydantic import BaseModel

__all__ = ["DISTRIBUTION_FIELDS", "align_behaviour_temperature"]

#: Request fields that reshape the sampled distribution, with the values that leave it alone.
DISTRIBUTION_FIELDS: Mapping[str, tuple[Any, ...]] = {
    "top_p": (1, 1.0),
    "top_k": (0, -1),
    "min_p": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "logit_bias": ({}, None),
}

_DEFAULT_TEMPERATURE = 1.0


def align_behaviour_temperature(data: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of raw ``TrainConfig`` data with the behaviour temperature set both ways.

    ``rollouts.train_sampling.temperature`` and ``algorithm.grpo.temperature`` both end up
    holding the one that was given (1.0 when neither was), and ``train_sampling`` gets
    ``top_p: 1.0`` so an agent's own ``top_p`` cannot reach the engine in a training rollout.

    Raises:
        ValueError: the two temperatures differ, the temperature is not a number > 0, or
            ``train_sampling`` sets a field of :data:`DISTRIBUTION_FIELDS` to a value that
            changes the distribution. Each message names the option.
    """
    out = dict(data)
    rollouts = _section(out.get("rollouts"))
    algorithm = _section(out.get("algorithm"))
    grpo = None if algorithm is None else _section(algorithm.get("grpo"))
    raw_sampling = None if rollouts is None else rollouts.get("train_sampling", {})
    if rollouts is None or algorithm is None or grpo is None or not isinstance(raw_sampling, dict):
        return out  # not a mapping: the model's own validation reports it
    sampling = dict(cast("dict[str, Any]", raw_sampling))
    temperature = _one_temperature(sampling.get("temperature"), grpo.get("temperature"))
    for name, neutral in DISTRIBUTION_FIELDS.items():
        if name in sampling and sampling[name] not in neutral:
            raise ValueError(
                f"rollouts.train_sampling.{name}={sampling[name]!r} changes the sampled "
                "distribution, which the trainer's logprobs cannot reproduce; remove it "
                f"(allowed: {neutral[0]!r}); it can go in val_sampling"
            )
    sampling["temperature"] = temperature
    sampling.setdefault("top_p", 1.0)
    grpo["temperature"] = temperature
    out["rollouts"] = {**rollouts, "train_sampling": sampling}
    out["algorithm"] = {**algorithm, "grpo": grpo}
    return out


def _one_temperature(sampled: Any, trained: Any) -> float:
    """Reconcile the two settings: the one given, or the same value twice."""
    if sampled is not None and trained is not None and sampled != trained:
        raise ValueError(
            f"rollouts.train_sampling.temperature={sampled!r} and "
            f"algorithm.grpo.temperature={trained!r} differ: the trainer must compute its "
            "logprobs at the temperature the rollouts were sampled at; set only one of them"
        )
    value = sampled if sampled is not None else trained
    if value is None:
        return _DEFAULT_TEMPERATURE
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(
            f"rollouts.train_sampling.temperature={value!r} must be a number > 0: training "
            "rollouts sample the policy they train (greedy has no distribution to correct)"
        )
    return float(value)


def _section(value: Any) -> dict[str, Any] | None:
    """Return a config section as a fresh dict (``{}`` when absent, ``None`` when invalid)."""
    if value is None:
        return {}
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    if isinstance(value, dict):
        return dict(cast("dict[str, Any]", value))
    return None
