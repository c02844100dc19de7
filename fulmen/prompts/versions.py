"""Prompt versions read back from a store: each distinct prompt, its lineage and its scores.

A prompt version is a named ``PromptTemplate`` in the first resources snapshot that holds it;
a later snapshot that carries the same prompt unchanged (a GRPO step publishing a new adapter,
say) is not a new prompt version. Scores are ``PromptScore`` entries that later snapshots keep
in their metadata (``PROMPT_SCORES_KEY``); they are joined to the version they name. Every
backend returns the same snapshots, so this reads the same from memory, SQLite, PostgreSQL and
HTTP stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from fulmen.errors import ConfigError, NotFound
from fulmen.types import PROMPT_SCORES_KEY, PromptScore, PromptTemplate, Resources

if TYPE_CHECKING:
    from fulmen.store.roles import RolloutQueue

__all__ = [
    "PromptVersion",
    "find_prompt_version",
    "load_prompt_versions",
    "prompt_versions_of",
    "scores_in",
]

_SCORES = TypeAdapter(list[PromptScore])


@dataclass
class PromptVersion:
    """One distinct prompt: where it first appeared, its text, lineage and scores.

    Attributes:
        name: the resource name agents receive it by.
        version: the resources version that first held this prompt.
        prompt: the template itself (``prompt.lineage`` says where it came from).
        created_at: when that snapshot was stored.
        metadata: that snapshot's metadata.
        scores: every score stored for it, oldest first.
        republished_in: later versions that carry it unchanged.
    """

    name: str
    version: int
    prompt: PromptTemplate
    created_at: datetime
    metadata: dict[str, object] = field(default_factory=dict[str, object])
    scores: list[PromptScore] = field(default_factory=list[PromptScore])
    republished_in: list[int] = field(default_factory=list[int])

    @property
    def ref(self) -> str:
        """The reference the CLI accepts for exactly this version: ``name@version``."""
        return f"{self.name}@{self.version}"

    @property
    def score(self) -> float | None:
        """The latest validation score stored for it, ``None`` when it was never scored."""
        val = [s for s in self.scores if s.split == "val"]
        return val[-1].score if val else None

    def as_json(self, *, score_instances: bool = True) -> dict[str, Any]:
        """Return its reference, place, lineage and scores as JSON values (not the text).

        ``score_instances=False`` leaves each score's per-instance results out (the dashboard
        lists every version at once).
        """
        lineage = self.prompt.lineage
        exclude = None if score_instances else {"instances"}
        return {
            "ref": self.ref,
            "name": self.name,
            "version": self.version,
            "created_at": self.created_at.isoformat(),
            "republished_in": self.republished_in,
            "score": self.score,
            "scores": [s.model_dump(mode="json", exclude=exclude) for s in self.scores],
            "lineage": lineage.model_dump(mode="json") if lineage is not None else None,
        }


def scores_in(snapshot: Resources) -> list[PromptScore]:
    """Return the ``PromptScore`` entries a snapshot's metadata holds (``ConfigError`` if bad)."""
    raw = snapshot.metadata.get(PROMPT_SCORES_KEY)
    if raw is None:
        return []
    try:
        return _SCORES.validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(
            f"resources v{snapshot.version}: metadata[{PROMPT_SCORES_KEY!r}] is not a list of "
            f"prompt scores: {exc.errors()[0]['msg']}"
        ) from exc


async def load_prompt_versions(
    store: RolloutQueue, *, name: str | None = None
) -> list[PromptVersion]:
    """Read every snapshot and return the distinct prompt versions, oldest first.

    ``name`` keeps only prompts of that resource name. Reads versions ``1..latest`` one by one,
    which every backend supports; a store with many thousands of versions takes a while.
    """
    latest = await store.latest_resources()
    if latest is None:
        return []
    snapshots = [await store.get_resources(v) for v in range(1, latest.version)] + [latest]
    return prompt_versions_of(snapshots, name=name)


def prompt_versions_of(
    snapshots: Sequence[Resources], *, name: str | None = None
) -> list[PromptVersion]:
    """Build the prompt versions of snapshots given oldest first (see ``load_prompt_versions``)."""
    versions: list[PromptVersion] = []
    by_content: dict[tuple[str, str], PromptVersion] = {}
    by_resources_version: dict[tuple[str, int], PromptVersion] = {}
    for snapshot in snapshots:
        for key, resource in snapshot.resources.items():
            if not isinstance(resource, PromptTemplate) or (name is not None and key != name):
                continue
            content = (key, resource.model_dump_json())
            found = by_content.get(content)
            if found is None:
                found = PromptVersion(
                    key, snapshot.version, resource, snapshot.created_at, dict(snapshot.metadata)
                )
                by_content[content] = found
                versions.append(found)
            else:
                found.republished_in.append(snapshot.version)
            by_resources_version[key, snapshot.version] = found
        for score in scores_in(snapshot):
            target = by_resources_version.get((score.name, score.version))
            if target is not None:
                target.scores.append(score)
    return versions


def find_prompt_version(versions: Sequence[PromptVersion], ref: str) -> PromptVersion:
    """Find a version by ``NAME`` (its newest), ``VERSION`` (a resources version) or both.

    ``NAME@VERSION`` and a bare ``VERSION`` accept any resources version that carries the
    prompt, not only the first one. ``NotFound`` names what exists when nothing matches, and a
    bare version holding several prompts is a ``ConfigError`` asking for ``NAME@VERSION``.
    """
    name, _, number = ref.rpartition("@") if "@" in ref else ("", "", ref)
    if not number.isdigit():
        name, number = ref, ""
    matches = [
        v
        for v in versions
        if (not name or v.name == name)
        and (not number or int(number) in (v.version, *v.republished_in))
    ]
    if not matches:
        known = ", ".join(v.ref for v in versions[-10:]) or "none"
        raise NotFound(f"no prompt version {ref!r}; latest known: {known}")
    if number and len({v.name for v in matches}) > 1:
        names = sorted({v.name for v in matches})
        raise ConfigError(
            f"resources v{number} holds several prompts {names}; say which: "
            + " or ".join(f"{n}@{number}" for n in names)
        )
    return matches[-1]
