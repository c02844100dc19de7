"""The behaviour policy of training rollouts: one temperature, no truncation.

GRPO's importance ratio divides the trainer's probability of each sampled token by the
probability the engine sampled it with (PPO's ratio is the same). The engines record logprobs
of the distribution they sampled from (``logits / temperature``, after any top-k / top-p), and
the trainer recomputes ``log_softmax(logits / temperature)``; the two agree only when both use
the same temperature and nothing truncates the distribution. :func:`align_behaviour_temperature`
makes a raw training config say so: ``rollouts.train_sampling.temperature`` and the update
temperature of every stage whose config declares one (``AlgorithmSection.behaviour_temperature``:
``algorithm.grpo.temperature``, ``algorithm.ppo.temperature``) are one setting (either derives
the other; different values are an error), and sampling fields the trainer cannot reproduce are
refused. Which fields those are is one rule, ``fulmen.types.behaviour``, which the gateway also
applies to every call of a training rollout (``LLMResource.behaviour_modes``, set by
``StageContext.publish`` for such a stage).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from pydantic import BaseModel

from fulmen.algorithms.registry import DEFAULT, registered
from fulmen.types.behaviour import DISTRIBUTION_FIELDS, refused_field, reshaped_fields

__all__ = ["DISTRIBUTION_FIELDS", "align_behaviour_temperature"]

_DEFAULT_TEMPERATURE = 1.0


def align_behaviour_temperature(data: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of raw ``TrainConfig`` data with the behaviour temperature set both ways.

    ``rollouts.train_sampling.temperature`` and the update temperature of every algorithm
    (``algorithm`` or an entry of ``stages``) whose config declares one
    (``AlgorithmSection.behaviour_temperature``) all end up holding the one that was given
    (1.0 when none was), and ``train_sampling`` gets ``top_p: 1.0`` so an agent's own
    ``top_p`` cannot reach the engine in a training rollout. A config without such an
    algorithm is returned unchanged: nothing computes importance ratios then.

    Raises:
        ValueError: two temperatures differ, the temperature is not a number > 0, or
            ``train_sampling`` sets a field of :data:`DISTRIBUTION_FIELDS` to a value that
            changes the distribution or a field that constrains decoding
            (``fulmen.types.behaviour.CONSTRAINT_FIELDS``). Each message names the option.
    """
    out = dict(data)
    rollouts = _section(out.get("rollouts"))
    raw_sampling = None if rollouts is None else rollouts.get("train_sampling", {})
    if rollouts is None or not isinstance(raw_sampling, dict):
        return out  # not a mapping: the model's own validation reports it
    places = _ratio_places(out)
    if not places:
        return out
    sampling = dict(cast("dict[str, Any]", raw_sampling))
    temperature = sampling.get("temperature")
    source = "rollouts.train_sampling.temperature"
    for where, key, algorithm in places:
        update = _section(algorithm.get(key))
        given = None if update is None else update.get("temperature")
        if given is None:
            continue
        if temperature is not None and given != temperature:
            raise ValueError(
                f"{source}={temperature!r} and {where}.{key}.temperature={given!r} differ: the "
                "trainer must compute its logprobs at the temperature the rollouts were "
                "sampled at; set only one of them"
            )
        if temperature is None:
            temperature, source = given, f"{where}.{key}.temperature"
    temperature = _checked_temperature(temperature)
    reshaped = reshaped_fields(sampling)
    if reshaped:
        name = reshaped[0]
        raise ValueError(
            f"rollouts.train_sampling.{name}={sampling[name]!r} changes the sampled "
            "distribution, which the trainer's logprobs cannot reproduce; remove it "
            f"(allowed: {DISTRIBUTION_FIELDS[name][0]!r}); it can go in val_sampling"
        )
    refused = refused_field(sampling)
    if refused is not None:
        raise ValueError(
            f"rollouts.train_sampling.{refused} constrains decoding, which the trainer's "
            "logprobs cannot reproduce; remove it (it can go in val_sampling)"
        )
    sampling["temperature"] = temperature
    sampling.setdefault("top_p", 1.0)
    out["rollouts"] = {**rollouts, "train_sampling": sampling}
    for where, key, algorithm in places:
        update = _section(algorithm.get(key))
        if update is None:
            continue  # not a mapping: the model's own validation reports it
        algorithm[key] = {**update, "temperature": temperature}
        if where == "algorithm":
            out["algorithm"] = algorithm
        else:
            stages = list(out["stages"])
            stages[int(where.split(".")[1])] = algorithm
            out["stages"] = stages
    return out


def _ratio_places(data: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Find the sections of a raw config whose update takes a ratio: where, update key, copy."""
    stages = data.get("stages")
    if isinstance(stages, list):
        found = [(f"stages.{i}", s) for i, s in enumerate(cast("list[Any]", stages))]
    else:
        found = [("algorithm", data.get("algorithm"))]
    places: list[tuple[str, str, dict[str, Any]]] = []
    for where, raw in found:
        section = _section(raw)
        key = None if section is None else _behaviour_key(section.get("name", DEFAULT))
        if section is not None and key is not None:
            places.append((where, key, section))
    return places


def _behaviour_key(name: Any) -> str | None:
    """Return the update key whose temperature ``name`` assumes (``None``: none, or unknown)."""
    for row in registered():
        if row.name == name:
            return row.config_model().behaviour_temperature
    return None  # not an algorithm: the config's own validation reports it


def _checked_temperature(value: Any) -> float:
    """Check the behaviour temperature: the default when unset, else a number > 0."""
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
