"""Resources: immutable, versioned snapshots of what agents use (LLM endpoints, prompt templates).

The store numbers versions 1, 2, 3, ...; new rollouts get the latest version unless they ask for
another. A snapshot never changes once written: an update is a new version.

>>> p = PromptTemplate(instructions="Add the numbers.", template="Q: {a} + {b}")
>>> p.fields
('a', 'b')
>>> print(p.render(a=1, b=2))
Add the numbers.
Q: 1 + 2
"""

from __future__ import annotations

from datetime import datetime
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, model_validator

from fulmen.types.behaviour import forced_fields, refused_field, reshaped_fields
from fulmen.types.limits import Id, JsonData, Text
from fulmen.types.prompt import Demonstration, PromptLineage, template_fields
from fulmen.types.rollout import Mode

__all__ = ["LLMResource", "PromptTemplate", "Resource", "Resources", "ResourcesCreate"]


def _kind_is_required(schema: dict[str, Any]) -> None:
    """State in the JSON schema what the discriminated union enforces: ``kind`` must be sent."""
    required = schema.setdefault("required", [])
    if "kind" not in required:
        required.insert(0, "kind")


# An agent-name pattern or a served model name in ``LLMResource.agent_models``.
_Name: TypeAlias = Annotated[Text, StringConstraints(min_length=1, max_length=256)]


class LLMResource(BaseModel):
    """An OpenAI-compatible endpoint and the sampling parameters to use with it.

    ``sampling`` maps a mode (``train``/``val``/``test``) or ``default`` to request fields (e.g.
    ``{"default": {"temperature": 1.0}, "val": {"temperature": 0.0}}``); the gateway applies them.
    ``agent_models`` routes calls by agent: it maps agent-name patterns (``fnmatch``, tried in
    order) to the model that serves that agent's calls, e.g. one LoRA adapter per role
    (``{"write_query": "policy-writer-12"}``). The gateway replaces the ``model`` of a call whose
    agent name (the ``x-fulmen-agent`` header) matches; other calls keep ``model``, so the agent
    asks for ``model`` everywhere and needs no per-role code.
    ``behaviour_modes`` names the modes whose calls sample the behaviour policy a trainer
    corrects for (``train`` when GRPO trains on them): in those the gateway also sends every
    field of ``fulmen.types.behaviour.DISTRIBUTION_FIELDS`` at its neutral value (``top_k: -1``,
    ``min_p: 0``, ...) and refuses a call that sets one of its ``CONSTRAINT_FIELDS``
    (``response_format``, ``guided_json``, ...) with a 400 naming it; their sampling must set
    ``temperature`` > 0 and nothing that reshapes the distribution.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_kind_is_required)

    kind: Literal["llm"] = "llm"
    base_url: str
    model: str
    api_key: str | None = None
    sampling: dict[str, dict[str, JsonData]] = Field(default_factory=dict)
    agent_models: dict[_Name, _Name] = Field(default_factory=dict, max_length=256)
    behaviour_modes: tuple[Mode, ...] = ()

    @model_validator(mode="after")
    def _check_behaviour_modes(self) -> LLMResource:
        for mode in self.behaviour_modes:
            fields = self._sampling_of(mode)
            temperature = fields.get("temperature")
            if (
                isinstance(temperature, bool)
                or not isinstance(temperature, int | float)
                or not temperature > 0
            ):
                raise ValueError(
                    f"sampling of behaviour mode {mode.value!r} must set temperature > 0 (the "
                    f"behaviour policy's), got {temperature!r}"
                )
            wrong = [*reshaped_fields(fields), refused_field(fields)]
            if wrong[0] is not None:
                raise ValueError(
                    f"sampling of behaviour mode {mode.value!r} sets {wrong[0]}, which "
                    "changes the sampled distribution; leave it out of that mode"
                )
        return self

    def _sampling_of(self, mode: str) -> dict[str, JsonData]:
        return {**self.sampling.get("default", {}), **self.sampling.get(mode, {})}

    def samples_behaviour(self, mode: str) -> bool:
        """Whether calls of ``mode`` rollouts sample the behaviour policy (see the class)."""
        return mode in self.behaviour_modes

    def request_fields(self, mode: str) -> dict[str, JsonData]:
        """Return the fields the gateway sets on a call of a ``mode`` rollout.

        ``sampling["default"]``, then ``sampling[mode]``, then, in a behaviour mode, every
        distribution field at its neutral value.
        """
        fields = self._sampling_of(mode)
        if mode in self.behaviour_modes:
            fields.update(forced_fields())
        return fields

    def model_for(self, agent_name: str | None) -> str:
        """Return the model that serves ``agent_name``'s calls: its route, else ``model``."""
        if agent_name is not None:
            for pattern, model in self.agent_models.items():
                if fnmatchcase(agent_name, pattern):
                    return model
        return self.model


class PromptTemplate(BaseModel):
    """A prompt an agent receives by name: instructions, a template with fields, demonstrations.

    ``template`` is rendered with the task's fields (``str.format`` syntax, ``{{``/``}}`` for
    literal braces); ``instructions`` is fixed text that comes first (the part a prompt
    optimizer usually rewrites); ``demos`` are few-shot examples rendered with the same template.
    ``fields`` lists the placeholders the template uses; it is filled in when left out and
    checked when given. ``instructions`` may not have placeholders (write ``{{`` for a brace).

    Attributes:
        template: the per-input text, e.g. ``"Question: {question}"``.
        instructions: text before everything else (empty for none).
        fields: the template's placeholder names, in order of first use.
        demos: few-shot demonstrations; each gives every field.
        lineage: where this version came from, if an optimizer or a person said so.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_kind_is_required)

    kind: Literal["prompt"] = "prompt"
    template: str
    instructions: str = ""
    fields: tuple[str, ...] | None = None
    demos: tuple[Demonstration, ...] = ()
    lineage: PromptLineage | None = None

    @model_validator(mode="after")
    def _check_fields(self) -> PromptTemplate:
        used = template_fields(self.template)
        if self.fields is None:
            object.__setattr__(self, "fields", used)
        elif set(self.fields) != set(used) or len(self.fields) != len(used):
            raise ValueError(
                f"fields {list(self.fields)} do not match the placeholders the template uses "
                f"{list(used)} (template {self.template[:80]!r})"
            )
        if stray := template_fields(self.instructions):
            raise ValueError(
                f"instructions may not have placeholders, found {list(stray)}; "
                "put fields in the template or write {{ }} for literal braces"
            )
        for index, demo in enumerate(self.demos):
            if missing := [f for f in used if f not in demo.inputs]:
                raise ValueError(f"demos[{index}] lacks field(s) {missing} of the template")
        return self

    def field_names(self) -> tuple[str, ...]:
        """Return the template's placeholder names (``fields``; never ``None`` once built)."""
        return self.fields or ()

    def format_input(self, values: dict[str, Any]) -> str:
        """Render the template alone with ``values`` (extra keys are ignored).

        Raises ``ValueError`` naming the fields ``values`` lacks.
        """
        missing = [f for f in self.field_names() if f not in values]
        if missing:
            raise ValueError(
                f"prompt needs field(s) {missing}; got {sorted(values)} "
                f"(template {self.template[:80]!r})"
            )
        return self.template.format(**{f: values[f] for f in self.field_names()})

    def instructions_text(self) -> str:
        """Return the instructions with ``{{``/``}}`` turned into single braces."""
        return self.instructions.format()

    def render(self, **values: Any) -> str:
        """Return the whole prompt as one text: instructions, demos, then this input.

        Each demonstration is its rendered input followed by its turns, one per line; blocks
        are separated by a blank line. Use ``messages`` for chat models.
        """
        blocks = [self.instructions_text()] if self.instructions else []
        for demo in self.demos:
            lines = [self.format_input(demo.inputs), *(t.content for t in demo.turns())]
            blocks.append("\n".join(lines))
        blocks.append(self.format_input(values))
        return "\n".join(blocks) if not self.demos else "\n\n".join(blocks)

    def export_text(self) -> str:
        """Return the whole prompt as one ``str.format`` template, to paste into production code.

        Demonstrations are written out and the template's placeholders are kept, so
        ``export_text().format(**values) == render(**values)``; braces in the demonstrations
        are doubled to stay literal.
        """
        blocks = [self.instructions] if self.instructions else []
        for demo in self.demos:
            lines = [self.format_input(demo.inputs), *(t.content for t in demo.turns())]
            blocks.append("\n".join(lines).replace("{", "{{").replace("}", "}}"))
        blocks.append(self.template)
        return "\n".join(blocks) if not self.demos else "\n\n".join(blocks)

    def messages(self, *, system: bool = False, **values: Any) -> list[dict[str, JsonValue]]:
        """Return the prompt as chat messages: demos as earlier turns, then this input.

        The instructions open the first user message (or, with ``system=True``, a system
        message of their own), so base models without a system role read them too.
        """
        out: list[dict[str, JsonValue]] = []
        prefix = ""
        if self.instructions and system:
            out.append({"role": "system", "content": self.instructions_text()})
        elif self.instructions:
            prefix = self.instructions_text() + "\n"
        for demo in self.demos:
            out.append({"role": "user", "content": prefix + self.format_input(demo.inputs)})
            prefix = ""
            for turn in demo.turns():
                out.append({"role": turn.role, "content": turn.content})
        out.append({"role": "user", "content": prefix + self.format_input(values)})
        return out


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
