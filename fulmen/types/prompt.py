"""The parts of a prompt template resource: fields, demonstrations, lineage and scores.

A ``PromptTemplate`` (in ``fulmen.types.resources``) is what an agent receives by parameter
name (``prompt``, or any resource name), like ``llm``. Its text uses ``str.format``
placeholders (``{question}``); the fields a template uses are checked when it is built, so an
optimizer's rewrite that loses or invents a field is refused before any agent sees it. Every
version may say where it came from (``PromptLineage``: parent version, optimizer and step,
critique and edit). Resources are immutable, and a version's validation score is only known
after rollouts ran on that version, so scores are written afterwards as ``PromptScore``
entries in a later snapshot's metadata (under ``PROMPT_SCORES_KEY``); ``fulmen.prompts``
joins both back.

>>> PromptLineage(parent=3, optimizer="apo", step=1).parent
3
"""

from __future__ import annotations

import string
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fulmen.types.limits import FiniteFloat, Int32, JsonData

__all__ = [
    "PROMPT_SCORES_KEY",
    "Demonstration",
    "PromptLineage",
    "PromptMessage",
    "PromptScore",
    "template_fields",
]

PROMPT_SCORES_KEY: Final = "prompt_scores"
"""Key of a resources snapshot's metadata holding a list of ``PromptScore`` entries."""


def template_fields(text: str) -> tuple[str, ...]:
    """Return the named placeholders of a ``str.format`` text, in order of first use.

    Raises ``ValueError`` for a malformed text (an unmatched brace), a positional placeholder
    (``{}``, ``{0}``) or one with attribute or index access (``{a.b}``, ``{a[0]}``), naming it.

    >>> template_fields("{b} then {a} and {b}; {{literal}}")
    ('b', 'a')
    """
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"malformed template {text[:80]!r}: {exc}") from exc
    names: list[str] = []
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            raise ValueError(
                f"placeholder {{{name}}} in template {text[:80]!r} must be a plain name "
                "(no positional {} or {0}, no attribute or index access)"
            )
        for inner in template_fields(spec or ""):
            if inner not in names:
                names.append(inner)
        if name not in names:
            names.append(name)
    return tuple(names)


class PromptMessage(BaseModel):
    """One chat message of a demonstration (``user`` turns are tool results or follow-ups)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str


class Demonstration(BaseModel):
    """A solved example: the template's input fields and what the model should produce.

    ``messages`` are the turns after the rendered input (the model's answer, or a tool
    exchange: assistant, user with the tool result, assistant again); ``output`` is shorthand
    for a single assistant turn. ``metadata`` may say where it came from (a rollout id, a reward).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    inputs: dict[str, JsonData]
    messages: tuple[PromptMessage, ...] = ()
    output: str | None = None
    metadata: dict[str, JsonData] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _has_an_answer(self) -> Demonstration:
        if self.output is None and not self.messages:
            raise ValueError(f"demonstration {self.inputs!r} needs an output or messages")
        if self.output is not None and self.messages:
            raise ValueError(
                f"demonstration {self.inputs!r} has both output and messages; give one"
            )
        return self

    def turns(self) -> tuple[PromptMessage, ...]:
        """Return the turns after the input (``output`` as one assistant message)."""
        if self.output is not None:
            return (PromptMessage(role="assistant", content=self.output),)
        return self.messages


class PromptLineage(BaseModel):
    """Where a prompt version came from.

    Attributes:
        parent: the resources version holding the prompt it was derived from (``None`` for a
            prompt written by hand).
        optimizer: what made it (``apo``, ``demos``, ``manual``, ...).
        step: the optimizer's round or step that made it.
        critique: the feedback that motivated the change (APO's textual gradient).
        edit: what was changed, as the editor described or returned it.
        run_id: the optimization run that made it, so one store can hold several searches.
        details: anything else the optimizer wants kept (seeds, demo rollout ids, ...).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    parent: Int32 | None = Field(default=None, ge=1)
    optimizer: str = "manual"
    step: Int32 | None = Field(default=None, ge=0)
    critique: str | None = None
    edit: str | None = None
    run_id: str | None = None
    details: dict[str, JsonData] = Field(default_factory=dict)


class PromptScore(BaseModel):
    """A validation score of one prompt version, stored in a later snapshot's metadata.

    Attributes:
        version: the resources version whose prompt was scored.
        name: the prompt's resource name in that version.
        score: the mean reward over the validation tasks.
        instances: the reward per validation task id (for Pareto selection and inspection).
        split: which task set produced it (``val`` unless said otherwise).
        run_id: the optimization run that measured it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Int32 = Field(ge=1)
    name: str
    score: FiniteFloat
    instances: dict[str, FiniteFloat] = Field(default_factory=dict)
    split: str = "val"
    run_id: str | None = None
