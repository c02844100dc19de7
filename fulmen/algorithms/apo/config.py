"""``algorithm: apo``: its settings, one typed object, each option documented once."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from fulmen.algorithms.section import AlgorithmSection
from fulmen.errors import ConfigError
from fulmen.prompts.loading import import_prompt
from fulmen.types import PromptTemplate

__all__ = ["APOConfig", "OptimizerEndpoint"]


class OptimizerEndpoint(BaseModel):
    """The OpenAI-compatible model that writes critiques or edits, and how to sample it.

    Attributes:
        base_url: its ``.../v1`` URL; ``None`` uses the engine that serves the run's policy
            (the built-in engine, say). A hosted model: ``https://api.openai.com/v1``.
        model: the model name to request (``None`` with no ``base_url``: the name the run's
            engine serves the policy under; a hosted endpoint needs one).
        api_key_env: the environment variable holding its API key (never the key itself, so a
            config file can be shared); unset for a local engine.
        sampling: request fields sent with every call (``temperature``, ``max_tokens``, ...).
        timeout_s: seconds to wait for one answer.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    sampling: dict[str, JsonValue] = Field(
        default_factory=lambda: {"temperature": 0.7, "max_tokens": 256}
    )
    timeout_s: float = Field(default=120.0, gt=0)


class APOConfig(AlgorithmSection):
    """Automatic prompt optimization: textual gradients from a critic, rewrites by an editor.

    Attributes:
        prompt: the name of the prompt-template resource to optimize (the agent receives it by
            this parameter name).
        initial: the prompt to start from when the run carries none under that name, as
            ``"module:attribute"`` naming a ``PromptTemplate`` (e.g. ``agent:CALC_PROMPT``).
        rounds: optimization rounds (each: minibatch, critiques, edits, validation, selection).
        beam_width: prompts kept after each round by ``selection: beam``.
        selection: ``beam`` keeps the ``beam_width`` best mean validation scores; ``pareto``
            keeps every candidate that is best on at least one validation task (at most
            ``pareto_max``, most tasks won first), which keeps diverse prompts alive.
        pareto_max: the most prompts ``pareto`` keeps.
        branch: candidate rewrites the editor writes from each critique.
        minibatch: training tasks each beam prompt runs per round to find its failures.
        score_tasks: training tasks, drawn with ``seed`` and held apart from the minibatches,
            that score every candidate (``null``: the run's validation tasks, ``data.val``,
            which then no longer measure the result on unseen tasks).
        seed: seeds the choice of scoring tasks and minibatches (``None``: the run's seed).
        max_examples: low-reward rollouts shown to the critic per critique.
        threshold: a rollout below this reward is a failure to critique (``None``: the run's
            ``success_threshold``).
        max_rollouts: stop before a round once this many rollouts were run (``None``: no cap).
        max_minutes: stop before a round once this much wall time was spent (``None``: no cap).
        critic: the model that writes the critique (the textual gradient).
        editor: the model that rewrites the prompt (``None``: the critic's endpoint).
        max_chars: characters of one call's input or output shown to the critic.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["apo"] = "apo"
    prompt: str = Field(default="prompt", min_length=1)
    initial: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    rounds: int = Field(default=3, ge=1)
    beam_width: int = Field(default=2, ge=1)
    selection: Literal["beam", "pareto"] = "beam"
    pareto_max: int = Field(default=4, ge=1)
    branch: int = Field(default=2, ge=1)
    minibatch: int = Field(default=4, ge=1)
    score_tasks: int | None = Field(default=16, ge=1)
    seed: int | None = None
    max_examples: int = Field(default=3, ge=1)
    threshold: float | None = None
    max_rollouts: int | None = Field(default=None, ge=1)
    max_minutes: float | None = Field(default=None, gt=0)
    critic: OptimizerEndpoint = Field(default_factory=OptimizerEndpoint)
    editor: OptimizerEndpoint | None = None
    max_chars: int = Field(default=600, ge=50)

    @model_validator(mode="after")
    def _hosted_needs_model(self) -> APOConfig:
        for role, endpoint in (("critic", self.critic), ("editor", self.editor)):
            if endpoint is not None and endpoint.base_url and not endpoint.model:
                raise ValueError(f"algorithm.{role}.base_url is set, so {role}.model is needed")
        return self

    def planned(self) -> tuple[int, str]:
        """Return how many rounds the stage runs, and the option that sets it."""
        return self.rounds, "rounds"

    def editor_endpoint(self) -> OptimizerEndpoint:
        """Return the editor's endpoint (the critic's when ``editor`` is unset)."""
        return self.editor or self.critic

    def initial_prompt(self) -> PromptTemplate:
        """Import the ``initial`` prompt.

        Raises ``ConfigError`` naming ``initial`` when it is unset, cannot be imported, or is
        not a ``PromptTemplate``.
        """
        if self.initial is None:
            raise ConfigError(
                f"algorithm apo: the run carries no prompt named {self.prompt!r} and "
                "algorithm.initial is not set (e.g. initial: agent:CALC_PROMPT)"
            )
        return import_prompt(self.initial)
