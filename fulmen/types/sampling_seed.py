"""Seeded sampling: the seed a rollout's model calls are sampled with, derived from the run's seed.

A training run that draws its samples from an unseeded generator is one random draw: two runs
of the same config with the same ``seed`` learn from different samples and can end far apart
(calc, 40 minutes: +18.8 and +42.2 held-out points from identical advantages). So the trainer
gives each rollout it enqueues a ``sampling_seed`` in its metadata (:data:`SAMPLING_SEED_KEY`),
derived from the run's seed and the rollout's place in the run (stage, step tag, task slot,
group member), and the gateway derives each call's ``seed`` from it, the attempt's number, the
request as the agent sent it and how often that same request came before in the attempt. A
call's seed therefore depends on what the agent asked, not on when: concurrent calls of one
rollout, or rollouts finishing in another order, get the same seeds as before, a retried
request (an agent that asks again after a reply it could not parse) gets a new one, and the
members of a group (same task, same prompt) get different ones.

Seeds stay below 2**31: every engine fulmen serves accepts them, and the built-in engine adds
the choice index (``seed + i`` for ``n > 1``) without leaving the range torch accepts.

>>> rollout_seed(0, 1, "step3", 0, 2) == rollout_seed(0, 1, "step3", 0, 2)
True
>>> rollout_seed(0, 1, "step3", 0, 2) != rollout_seed(0, 1, "step3", 0, 3)
True
>>> 0 <= call_seed(7, attempt=1, digest=request_digest({"messages": []}), occurrence=0) < 2**31
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "SAMPLING_SEED_KEY",
    "call_seed",
    "request_digest",
    "rollout_seed",
    "seed_of",
]

#: The rollout metadata key that holds its sampling seed.
SAMPLING_SEED_KEY = "sampling_seed"

_SEED_RANGE = 2**31


def _derive(*parts: object) -> int:
    """Hash ``parts`` (their ``repr``, joined unambiguously) into ``[0, 2**31)``."""
    h = hashlib.blake2b(digest_size=8, person=b"fulmen-seed")
    for part in parts:
        text = repr(part).encode()
        h.update(len(text).to_bytes(4, "big"))
        h.update(text)
    return int.from_bytes(h.digest(), "big") % _SEED_RANGE


def rollout_seed(run_seed: int, *place: int | str) -> int:
    """Return the sampling seed of the rollout at ``place`` in a run seeded ``run_seed``.

    ``place`` names the rollout without the run's random id, so the same config and seed give
    the same seeds in another run (the trainer passes stage, tag, task slot and group member).
    """
    return _derive("rollout", run_seed, *place)


#: Keys whose string values are ids an engine or API made up (a tool call's ``id``, the
#: ``tool_call_id`` / ``tool_use_id`` / ``call_id`` that answer it, a previous response's id).
_ID_KEYS = frozenset({"id", "tool_call_id", "tool_use_id", "call_id", "previous_response_id"})


def request_digest(body: Mapping[str, Any]) -> bytes:
    """Return a digest of a request body as the agent sent it (key order does not matter).

    Ids are digested by the order they first appear in, not by their text: engines make up
    a tool call's id at random, and the agent sends it back in its next request, so the text
    would give that request another seed in every run (a multi-call rollout would repeat its
    first call only). Which id answers which call still counts.
    """
    ids: dict[str, str] = {}
    # A body the gateway accepted is JSON; keys of any type sort as strings.
    raw = orjson.dumps(
        _with_ordinal_ids(body, ids), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    )
    return hashlib.blake2b(raw, digest_size=16).digest()


def _with_ordinal_ids(value: Any, ids: dict[str, str]) -> Any:
    """``value`` with each id (a string under an ``_ID_KEYS`` key) replaced by its ordinal.

    Keys are visited sorted, so the ordinals do not depend on key order either. The gateway
    takes bodies at most 64 levels deep (``MAX_BODY_DEPTH``), far within the stack's reach.
    """
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k in sorted(value, key=str):
            v = value[k]
            if k in _ID_KEYS and isinstance(v, str):
                out[k] = ids.setdefault(v, f"#{len(ids)}")
            else:
                out[k] = _with_ordinal_ids(v, ids)
        return out
    if isinstance(value, list):
        return [_with_ordinal_ids(v, ids) for v in value]
    return value


def call_seed(rollout: int, *, attempt: int, digest: bytes, occurrence: int) -> int:
    """Return the seed of a call: the ``occurrence``-th request ``digest`` of ``attempt``."""
    return _derive("call", rollout, attempt, digest.hex(), occurrence)


def seed_of(metadata: Mapping[str, Any]) -> int | None:
    """Return the sampling seed stored in a rollout's ``metadata``, or ``None``.

    Only a plain integer in the seed range counts: metadata is the enqueuer's, and a value
    that is not one (a string, a bool, a float) means the rollout is not seeded.
    """
    value = metadata.get(SAMPLING_SEED_KEY)
    if type(value) is int and 0 <= value < _SEED_RANGE:
        return value
    return None
