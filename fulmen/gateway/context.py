"""Which rollout and attempt a call belongs to, whether it may run, and its sampling overrides.

Lookups hit the store once and are cached: a rollout's mode and resources version and a
resources snapshot never change, so they are kept (bounded LRU); a *running* attempt's status is
trusted for ``attempt_ttl_s`` and then re-read, a *final* one is kept for good. So a busy
rollout costs the store one attempt read per second at most, and an attempt that ended stops
getting answers within that time.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from fulmen.errors import NotFound
from fulmen.gateway.errors import AttemptFinished, UnknownAttempt
from fulmen.store.base import Store
from fulmen.types import Attempt, LLMResource, Resources, Rollout
from fulmen.types.sampling_seed import seed_of

__all__ = ["CallContext", "ContextResolver", "sampling_overrides"]

K = TypeVar("K")
V = TypeVar("V")


class _LRU(Generic[K, V]):
    """A small bounded mapping that forgets the least recently used entry."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self._size:
            self._data.popitem(last=False)


@dataclass(frozen=True)
class CallContext:
    """A tracked call's rollout, attempt, mode and the resources the rollout runs with.

    ``sampling_seed`` is the rollout's (``fulmen.types.sampling_seed``; ``None``: unseeded) and
    ``attempt_number`` the attempt's number, from which the gateway derives each call's seed.
    """

    rollout_id: str
    attempt_id: str
    mode: str
    resources: Resources | None = field(default=None, compare=False)
    sampling_seed: int | None = None
    attempt_number: int = 1

    def overrides(self, model: Any, agent_name: str | None = None) -> dict[str, Any]:
        """Return the request fields to force on a call for ``model`` by ``agent_name``.

        The sampling fields of the rollout's mode (``LLMResource.request_fields``: in a mode
        that samples the behaviour policy, every distribution field at its neutral value too),
        plus ``model`` when the LLM resource routes that agent to another model
        (``LLMResource.agent_models``: its role's adapter).
        """
        if self.resources is None:
            return {}
        llm = _llm_for(self.resources, model)
        if llm is None:
            return {}
        fields: dict[str, Any] = llm.request_fields(self.mode)
        routed = llm.model_for(agent_name)
        if routed != model and routed != llm.model:
            fields["model"] = routed
        return fields

    def samples_behaviour(self, model: Any) -> bool:
        """Whether a call for ``model`` samples the behaviour policy a trainer corrects for.

        Such a call may not constrain decoding (``fulmen.types.behaviour.refused_field``).
        """
        llm = None if self.resources is None else _llm_for(self.resources, model)
        return llm is not None and llm.samples_behaviour(self.mode)


def sampling_overrides(resources: Resources, mode: str, model: Any) -> dict[str, Any]:
    """Return the request fields ``resources`` set for ``mode`` (``LLMResource.request_fields``)."""
    llm = _llm_for(resources, model)
    if llm is None:
        return {}
    return dict(llm.request_fields(mode))


def _llm_for(resources: Resources, model: Any) -> LLMResource | None:
    """Return the call's LLM resource: the only one, or else the one whose ``model`` it asks."""
    llms = [r for r in resources.resources.values() if isinstance(r, LLMResource)]
    if len(llms) > 1:
        llms = [r for r in llms if r.model == model]
    return llms[0] if len(llms) == 1 else None


class ContextResolver:
    """Resolves ``(rollout_id, attempt_id)`` of a URL into a ``CallContext``, with caches.

    Args:
        store: where rollouts, attempts and resources live.
        attempt_ttl_s: how long a running attempt is trusted before its status is re-read.
        cache_size: most rollouts and attempts remembered.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        store: Store,
        *,
        attempt_ttl_s: float = 1.0,
        cache_size: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl = attempt_ttl_s
        self._clock = clock
        self._rollouts: _LRU[str, Rollout] = _LRU(cache_size)
        self._attempts: _LRU[str, tuple[Attempt, float]] = _LRU(cache_size)
        self._resources: _LRU[int, Resources] = _LRU(64)

    async def resolve(self, rollout_id: str, attempt_id: str) -> CallContext:
        """Return the context, or raise ``UnknownAttempt`` (404) / ``AttemptFinished`` (409)."""
        rollout = await self._rollout(rollout_id)
        attempt = await self._attempt(attempt_id)
        if attempt.rollout_id != rollout_id:
            raise UnknownAttempt(
                f"attempt {attempt_id!r} belongs to rollout {attempt.rollout_id!r}, "
                f"not {rollout_id!r}"
            )
        if attempt.is_terminal:
            raise AttemptFinished(
                f"attempt {attempt_id!r} of rollout {rollout_id!r} is {attempt.status.value}; "
                "it accepts no more model calls"
            )
        resources = None
        if rollout.resources_version is not None:
            resources = await self._resources_of(rollout.resources_version)
        return CallContext(
            rollout_id,
            attempt_id,
            rollout.mode.value,
            resources,
            sampling_seed=seed_of(rollout.metadata),
            attempt_number=attempt.number,
        )

    async def _rollout(self, rollout_id: str) -> Rollout:
        rollout = self._rollouts.get(rollout_id)
        if rollout is None:
            try:
                rollout = await self._store.get_rollout(rollout_id)
            except NotFound as exc:
                raise UnknownAttempt(f"unknown rollout {rollout_id!r}") from exc
            self._rollouts.put(rollout_id, rollout)
        return rollout

    async def _attempt(self, attempt_id: str) -> Attempt:
        cached = self._attempts.get(attempt_id)
        now = self._clock()
        if cached is not None and (cached[0].is_terminal or now - cached[1] < self._ttl):
            return cached[0]
        try:
            attempt = await self._store.get_attempt(attempt_id)
        except NotFound as exc:
            raise UnknownAttempt(f"unknown attempt {attempt_id!r}") from exc
        self._attempts.put(attempt_id, (attempt, now))
        return attempt

    async def _resources_of(self, version: int) -> Resources:
        resources = self._resources.get(version)
        if resources is None:
            resources = await self._store.get_resources(version)
            self._resources.put(version, resources)
        return resources
