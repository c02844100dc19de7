"""The 0.x algorithms users configure (``APO``, ``VERL``, ``Baseline``) as fulmen configs.

Each keeps 0.x's constructor and turns into the fulmen algorithm section that does the same
job: ``APO`` → ``algorithm: apo`` (textual-gradient beam search), ``VERL`` → ``algorithm:
grpo`` through ``fulmen.compat.agentlightning.verl`` (its report says what happened to every
key), ``Baseline`` → ``Trainer.dev``'s plain run of the tasks. A 0.x ``Algorithm`` subclass of
one's own is refused by ``agl.Trainer``: fulmen's algorithms reach the store through their
context only (``docs/architecture.md``); port the loop to the store facade instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from fulmen.algorithms.apo.config import APOConfig, OptimizerEndpoint
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.verl import VerlTranslation, translate_verl_config

__all__ = ["APO", "VERL", "Algorithm", "Baseline"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Algorithm:
    """Base of the 0.x algorithm names this layer knows; each gives a fulmen section."""

    def fulmen_section(self) -> dict[str, Any]:
        """Return the ``algorithm:`` section of a fulmen training config."""
        raise NotImplementedError


class Baseline(Algorithm):
    """Run the tasks once, without training (0.x's ``Baseline``; ``agl.Trainer.dev``)."""

    def fulmen_section(self) -> dict[str, Any]:
        """Refused: a baseline trains nothing; ``agl.Trainer.dev`` runs it."""
        raise NotSupported(
            "Trainer(algorithm=Baseline()).fit",
            why="a baseline trains nothing",
            instead="trainer.dev(agent, dataset), which runs every task once and reports",
        )


class APO(Algorithm, Generic[T]):
    """0.x's automatic prompt optimization, as fulmen's ``apo`` (``docs/apo.md``).

    ``gradient_model`` writes the critique and ``apply_edit_model`` the rewrite, both at
    ``async_openai_client``'s base URL; ``None`` for the client (a fulmen addition) uses the
    engine that serves the run's model. ``gradient_batch_size`` low-reward runs are critiqued
    (and as many tasks run per beam prompt), ``val_batch_size`` tasks score each candidate.

    Args:
        api_key_env: the environment variable holding the client's key (fulmen never puts a
            key in a config); default ``OPENAI_API_KEY`` when the client has a key.
    """

    def __init__(
        self,
        async_openai_client: Any = None,
        *,
        gradient_model: str = "gpt-5-mini",
        apply_edit_model: str = "gpt-4.1-mini",
        diversity_temperature: float = 1.0,
        gradient_batch_size: int = 4,
        val_batch_size: int = 16,
        beam_width: int = 4,
        branch_factor: int = 4,
        beam_rounds: int = 3,
        rollout_batch_timeout: float = 3600.0,
        run_initial_validation: bool = True,
        api_key_env: str | None = None,
        _poml_trace: bool = False,
    ) -> None:
        if not run_initial_validation:
            raise NotSupported(
                "APO(run_initial_validation=False)",
                why="fulmen's apo always scores the starting prompt: it is the first beam",
                instead="leave run_initial_validation at True",
            )
        if rollout_batch_timeout != 3600.0:
            raise NotSupported(
                "APO(rollout_batch_timeout=...)",
                why="fulmen times out each rollout, not a batch",
                instead="rollouts.timeout_s in the fulmen config",
            )
        if _poml_trace:
            logger.info("APO(_poml_trace=True) has no effect: fulmen's apo writes no POML")
        self.client = async_openai_client
        self.gradient_model = gradient_model
        self.apply_edit_model = apply_edit_model
        self.diversity_temperature = diversity_temperature
        self.gradient_batch_size = gradient_batch_size
        self.val_batch_size = val_batch_size
        self.beam_width = beam_width
        self.branch_factor = branch_factor
        self.beam_rounds = beam_rounds
        self.api_key_env = api_key_env

    def _endpoint(self, model: str) -> OptimizerEndpoint:
        sampling: dict[str, Any] = {"temperature": self.diversity_temperature, "max_tokens": 512}
        if self.client is None:
            return OptimizerEndpoint(sampling=sampling)
        has_key = bool(getattr(self.client, "api_key", None))
        return OptimizerEndpoint(
            base_url=str(self.client.base_url),
            model=model,
            api_key_env=self.api_key_env or ("OPENAI_API_KEY" if has_key else None),
            sampling=sampling,
        )

    def fulmen_section(self) -> dict[str, Any]:
        """Return the ``algorithm: apo`` section (the prompt's name is set by ``agl.Trainer``)."""
        config = APOConfig(
            rounds=self.beam_rounds,
            beam_width=self.beam_width,
            branch=self.branch_factor,
            minibatch=self.gradient_batch_size,
            max_examples=self.gradient_batch_size,
            score_tasks=self.val_batch_size,
            critic=self._endpoint(self.gradient_model),
            editor=self._endpoint(self.apply_edit_model),
        )
        return config.model_dump(mode="json", exclude_none=True)


class VERL(Algorithm):
    """0.x's VERL algorithm (a nested VERL config dict), trained by fulmen's GRPO.

    Building it translates the config (``translation``, printable with ``report()``) and
    raises ``NotSupported`` naming every key whose refusal would change what is learned.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)
        self.translation: VerlTranslation = translate_verl_config(config)
        blocking = self.translation.blocking()
        if blocking:
            raise NotSupported(
                "VERL config keys " + ", ".join(f"{e.key}={e.value!r}" for e in blocking),
                why="; ".join(e.note for e in blocking),
                instead="change or remove them (the full report: python -m "
                "fulmen.compat.agentlightning verl-report CONFIG)",
            )

    def report(self) -> str:
        """Return the key-by-key report (honoured / translated / refused)."""
        return self.translation.render()

    def fulmen_section(self) -> dict[str, Any]:
        """Return the ``algorithm: grpo`` options the config yields (``algorithm.*`` overrides)."""
        section: dict[str, Any] = {"name": "grpo"}
        for path, value in self.translation.overrides.items():
            if path.startswith("algorithm."):
                _set(section, path.removeprefix("algorithm.").split("."), value)
        return section

    def top_level(self) -> dict[str, Any]:
        """Return the options outside ``algorithm:`` (model, rollouts, validation, tensorboard)."""
        out: dict[str, Any] = {}
        for path, value in self.translation.overrides.items():
            if not path.startswith("algorithm."):
                _set(out, path.split("."), value)
        return out


def _set(target: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value
