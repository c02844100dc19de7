"""Publishing prompt versions and their scores as resources snapshots.

``publish_prompt`` stores a new snapshot that is a base snapshot (by default the latest) with
one prompt replaced, so the agent keeps its ``llm`` and other resources. ``record_scores``
stores a snapshot that carries the base's resources unchanged and ``PromptScore`` entries in
its metadata: resources are immutable, and a score is only known after rollouts ran on the
version it scores. Both take an optional ``resources_id`` so a retried or resumed write is
stored once (the store is idempotent by it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fulmen.errors import ConfigError
from fulmen.types import PROMPT_SCORES_KEY, PromptScore, PromptTemplate, Resources, ResourcesCreate

if TYPE_CHECKING:
    from pydantic import JsonValue

    from fulmen.store.roles import RolloutQueue

__all__ = ["publish_prompt", "record_scores"]


async def _base_snapshot(store: RolloutQueue, base: int | Resources | None) -> Resources | None:
    if isinstance(base, Resources):
        return base
    if base is None:
        return await store.latest_resources()
    return await store.get_resources(base)


async def publish_prompt(
    store: RolloutQueue,
    name: str,
    prompt: PromptTemplate,
    *,
    base: int | Resources | None = None,
    metadata: Mapping[str, JsonValue] | None = None,
    resources_id: str | None = None,
) -> Resources:
    """Store ``prompt`` under ``name`` as a new resources version and return that version.

    The other resources come from ``base`` (a version number, a snapshot, or ``None`` for the
    latest; no resources at all when the store has none yet). Put the lineage on the prompt
    (``PromptTemplate.lineage``); ``metadata`` is the snapshot's own.

    Raises ``ConfigError`` when ``name`` holds an LLM endpoint in the base snapshot.
    """
    snapshot = await _base_snapshot(store, base)
    resources = dict(snapshot.resources) if snapshot is not None else {}
    if name in resources and not isinstance(resources[name], PromptTemplate):
        raise ConfigError(
            f"resource {name!r} of resources v{snapshot.version if snapshot else '?'} is an "
            "LLM endpoint, not a prompt; choose another name"
        )
    resources[name] = prompt
    return await store.add_resources(
        ResourcesCreate(
            resources=resources, metadata=dict(metadata or {}), resources_id=resources_id
        )
    )


async def record_scores(
    store: RolloutQueue,
    scores: Sequence[PromptScore],
    *,
    base: int | Resources | None = None,
    metadata: Mapping[str, JsonValue] | None = None,
    resources_id: str | None = None,
) -> Resources:
    """Store validation ``scores`` in a snapshot that carries ``base``'s resources unchanged.

    ``base`` (default: the latest version) is what rollouts enqueued without a version get
    from then on, so pass the version the next rollouts should use (the best prompt, say).
    Raises ``ConfigError`` when the store has no resources to carry.
    """
    snapshot = await _base_snapshot(store, base)
    if snapshot is None:
        raise ConfigError("cannot record prompt scores in a store without resources")
    data: dict[str, JsonValue] = dict(metadata or {})
    data[PROMPT_SCORES_KEY] = [s.model_dump(mode="json") for s in scores]
    return await store.add_resources(
        ResourcesCreate(
            resources=dict(snapshot.resources), metadata=data, resources_id=resources_id
        )
    )
