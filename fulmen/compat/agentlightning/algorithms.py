"""The 0.x algorithms users configure (``APO``, ``VERL``, ``Baseline``) on fulmen.

``APO`` and ``VERL`` keep 0.x's constructors and turn into the fulmen algorithm that does the
same job: ``APO`` → ``algorithm: apo`` (textual-gradient beam search), ``VERL`` → ``algorithm:
grpo`` through ``fulmen.compat.agentlightning.verl_config`` (its report says what happened to
every key). ``Baseline`` is 0.x's smoke-test algorithm: driven through its ``run`` like any
other ``Algorithm`` subclass, it runs every task once and logs what happened (what
``agl.Trainer.dev`` runs).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Generic, Literal, TypeVar

from fulmen.algorithms.apo.config import APOConfig, OptimizerEndpoint
from fulmen.compat.agentlightning.algorithm_base import Algorithm, FastAlgorithm
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.spans import find_final_reward
from fulmen.compat.agentlightning.verl_config import translate_verl_config
from fulmen.compat.agentlightning.verl_report import VerlTranslation

__all__ = ["APO", "VERL", "Baseline"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Baseline(FastAlgorithm):
    """Run every task once per epoch without training and log each rollout (0.x's ``Baseline``).

    Train tasks run as ``train`` rollouts and validation tasks as ``val`` ones, with the latest
    resources; each finished rollout is logged with its status, reward and, with
    ``span_verbosity``, its spans. ``results`` holds one row per rollout (``rollout_id``,
    ``mode``, ``status``, ``reward``, ``error``). ``polling_interval`` and
    ``max_queue_length`` only paced 0.x's queue: fulmen's runner takes rollouts as it can.

    Args:
        n_epochs: passes over the tasks.
        train_split: accepted for 0.x's signature (0.x checked it and did not use it).
        span_verbosity: ``keys`` logs each span's attribute names, ``key_values`` also their
            values, ``none`` no spans.
    """

    def __init__(
        self,
        *,
        n_epochs: int = 1,
        train_split: float = 0.5,
        polling_interval: float = 5.0,
        max_queue_length: int = 4,
        span_verbosity: Literal["keys", "key_values", "none"] = "keys",
    ) -> None:
        if not 0.0 < train_split < 1.0:
            raise ValueError("train_split must be between 0 and 1.")
        if n_epochs < 1:
            raise ValueError(f"n_epochs must be at least 1, got {n_epochs}")
        self.n_epochs = n_epochs
        self.train_split = train_split
        self.polling_interval = polling_interval
        self.max_queue_length = max_queue_length
        self.span_verbosity = span_verbosity
        self.results: list[dict[str, Any]] = []

    async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:
        """Run the tasks and log every rollout (``results`` keeps them)."""
        store = self.get_store()
        tasks = [("train", t) for t in _items(train_dataset)] + [
            ("val", t) for t in _items(val_dataset)
        ]
        if not tasks:
            logger.error("Baseline needs train_dataset or val_dataset; nothing to run")
            return
        for epoch in range(self.n_epochs):
            logger.info("Baseline epoch %d/%d: %d rollouts", epoch + 1, self.n_epochs, len(tasks))
            rollouts = [await store.enqueue_rollout(input=t, mode=m) for m, t in tasks]
            ids = [r.rollout_id for r in rollouts]
            done = {r.rollout_id: r for r in await store.wait_for_rollouts(rollout_ids=ids)}
            for rollout in rollouts:
                await self._report(done.get(rollout.rollout_id, rollout))

    async def _report(self, rollout: Any) -> None:
        store = self.get_store()
        spans = await store.query_spans(rollout.rollout_id, "latest")
        attempt = await store.get_latest_attempt(rollout.rollout_id)
        error = (attempt.metadata or {}).get("error") if attempt is not None else None
        reward = find_final_reward(spans)
        logger.info(
            "[Rollout %s] %s rollout finished with status %s, reward %s%s",
            rollout.rollout_id,
            rollout.mode,
            rollout.status,
            reward,
            f", error: {error}" if error else "",
        )
        if self.span_verbosity != "none":
            for span in spans:
                shown = (
                    span.attributes
                    if self.span_verbosity == "key_values"
                    else list(span.attributes)
                )
                logger.info("[Rollout %s] span #%d %s: %s", rollout.rollout_id,
                            span.sequence_id, span.name, shown)  # fmt: skip
        self.results.append(
            {
                "rollout_id": rollout.rollout_id,
                "mode": rollout.mode,
                "status": rollout.status,
                "reward": reward,
                "error": error,
            }
        )


def _items(dataset: Any) -> list[Any]:
    return [] if dataset is None else [dataset[i] for i in range(len(dataset))]


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
        """Return the ``algorithm: apo`` section (``agl.Trainer`` sets prompt and scoring)."""
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
