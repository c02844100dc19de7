"""Resources: immutable, versioned snapshots of what agents use (LLM endpoints, prompt templates).

The store numbers versions 1, 2, 3, ...; new rollouts get the latest version unless they ask for
another. A snapshot never changes once written: an update is a new version.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from fulmen.types.limits import Id, JsonData

__all__ = ["LLMResource", "PromptTemplate", "Resource", "Resources", "ResourcesCreate"]


def _kind_is_required(schema: dict[str, Any]) -> None:
    """State in the JSON schema what the discriminated union enforces: ``kind`` must be sent."""
    required = schema.setdefault("required", [])
    if "kind" not in required:
        required.insert(0, "kind")


class LLMResource(BaseModel):
    """An OpenAI-compatible endpoint and the sampling parameters to use with it.

    ``sampling`` maps a mode (``train``/``val``/``test``) or ``default`` to request fields (e.g.
    ``{"default": {"temperature": 1.0}, "val": {"temperature": 0.0}}``); the gateway applies them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_kind_is_required)

    kind: Literal["llm"] = "llm"
    base_url: str
    model: str
    api_key: str | None = None
    sampling: dict[str, dict[str, JsonData]] = Field(default_factory=dict)


class PromptTemplate(BaseModel):
    """A prompt template in Python ``str.format`` syntax (``{name}`` placeholders)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_kind_is_required)

    kind: Literal["prompt"] = "prompt"
    template: str


Resource: TypeAlias = Annotated[LLMResource | PromptTemplate, Field(discriminator="kind")]


class ResourcesCreate(BaseModel):
    """A new snapshot of named resources.

    ``resources_id`` may be chosen by the caller so a retried write is not duplicated.
    """

    model_config = ConfigDict(extra="forbid")

    resources: dict[str, Resource]
    resources_id: Id | None = None
    metadata: dict[str, JsonData] = Field(default_factory=dict)


class Resources(BaseModel):
    """A stored snapshot with its store-assigned version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    resources_id: str
    resources: dict[str, Resource]
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    created_at: datetime
