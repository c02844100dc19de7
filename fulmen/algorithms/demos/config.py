"""``algorithm: demos``: its settings, one typed object, each option documented once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

from pydantic import ConfigDict, Field, model_validator

from fulmen.algorithms.section import AlgorithmSection
from fulmen.errors import ConfigError
from fulmen.importing import import_object
from fulmen.types import PromptTemplate

__all__ = ["DemosConfig"]


class DemosConfig(AlgorithmSection):
    """Few-shot demonstrations bootstrapped from the agent's own successful runs.

    Attributes:
        prompt: the name of the prompt-template resource to give demonstrations (the agent
            receives it by this parameter name).
        initial: the prompt to start from when the run carries none under that name (the
            first stage of a run), as ``"module:attribute"`` naming a ``PromptTemplate``:
            typically the default the agent ships, e.g. ``agent:CALC_PROMPT``.
        demos: demonstrations per candidate prompt.
        candidates: candidate evaluations the search may spend, the unchanged prompt included
            (it is candidate 0, the baseline the others must beat).
        threshold: a rollout whose reward reaches this is "successful" and may become a
            demonstration (``None``: the run's ``success_threshold``).
        val_tasks: how many training tasks score each candidate. They are drawn with ``seed``
            and never serve as demonstrations; ``data.val`` is left alone, so the run's
            validation before and after measures the winner on tasks the search never saw.
        pool: how many demonstrations (from distinct tasks) to collect before searching.
        collect_rollouts: at most this many training rollouts are run to fill the pool when the
            store holds too few successful ones.
        collect_batch: training rollouts enqueued at once while collecting.
        collect_mode: the sampling those rollouts use: ``val`` (``rollouts.val_sampling``,
            greedy by default: the model's most likely outputs) or ``train``
            (``rollouts.train_sampling``: more varied, less often right).
        tidy: ``"module:function"`` applied to the text of each of the model's recorded turns
            before it enters a demonstration, e.g. to keep only the part the agent parses (a
            base model may add stray tokens after ``CALC(2 + 3)`` that the agent ignores but a
            demonstration would teach). ``None`` keeps the recorded text verbatim.
        seed: seeds the choice of search tasks and candidates (``None``: the run's seed).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["demos"] = "demos"
    prompt: str = Field(default="prompt", min_length=1)
    initial: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    demos: int = Field(default=3, ge=1)
    candidates: int = Field(default=8, ge=1)
    threshold: float | None = None
    val_tasks: int = Field(default=16, ge=1)
    pool: int = Field(default=12, ge=1)
    collect_rollouts: int = Field(default=64, ge=0)
    collect_batch: int = Field(default=16, ge=1)
    collect_mode: Literal["val", "train"] = "val"
    tidy: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    seed: int | None = None

    @model_validator(mode="after")
    def _no_dead_options(self) -> DemosConfig:
        if self.demos > self.pool:
            raise ValueError(
                f"demos ({self.demos}) is more than pool ({self.pool}): a candidate shows "
                "demonstrations from the pool"
            )
        unused = sorted({"collect_batch", "collect_mode"} & self.model_fields_set)
        if self.collect_rollouts == 0 and unused:
            raise ValueError(f"{', '.join(unused)} has no effect with collect_rollouts 0")
        return self

    def planned(self) -> tuple[int, str] | None:
        """``None``: how many candidates the search scores depends on the pool it collects."""
        return None

    def initial_prompt(self) -> PromptTemplate:
        """Import the ``initial`` prompt (``ConfigError`` naming it when unset or not one)."""
        from fulmen.prompts.loading import import_prompt

        if self.initial is None:
            raise ConfigError("algorithm demos: initial is not set")
        return import_prompt(self.initial)

    def tidy_function(self) -> Callable[[str], str] | None:
        """Import the ``tidy`` function (``None`` when unset); ``ConfigError`` if it fails."""
        if self.tidy is None:
            return None
        value = import_object(self.tidy, what="algorithm.tidy")
        if not callable(value):
            raise ConfigError(f"algorithm.tidy {self.tidy!r} is not callable")
        return cast("Callable[[str], str]", value)
