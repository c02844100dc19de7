"""``Trainer``: train an agent (``fit``) or try it without training (``dev``).

``fit`` starts the whole stack of a run — the SQLite store in the run directory, the engine,
the gateway and a runner — and runs the configured algorithm, or its ``stages:`` one after the
other (``fulmen.trainer.stages``). ``dev`` runs a few
rollouts against the current model or any OpenAI-compatible endpoint with an in-memory store and
prints what happened: calls, rewards and the transitions training would use.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from fulmen.engines.config import EngineConfig
from fulmen.errors import ConfigError
from fulmen.importing import put_first_on_sys_path
from fulmen.settings import Settings
from fulmen.trainer.config import TrainConfig
from fulmen.trainer.data import config_tasks, task_id_of
from fulmen.trainer.identity import ConfigChange, RunIdentity
from fulmen.trainer.metrics import MetricsLogger
from fulmen.trainer.preflight import check_before_start
from fulmen.trainer.sinks import open_sinks
from fulmen.trainer.stack import TrainingStack
from fulmen.trainer.state import RunState
from fulmen.types import Mode

if TYPE_CHECKING:
    from fulmen.trainer.best import EndOfRun
    from fulmen.trainer.diagnosis import Finding

__all__ = ["Trainer"]

logger = logging.getLogger("fulmen.train")


class Trainer:
    """Trains the agent named by (or passed with) a ``TrainConfig``.

    Args:
        config: the run's configuration (see ``fulmen.trainer.config``).
        store_token: bearer token of ``config.store_url`` when it is a protected
            ``http://`` store (``fulmen train`` passes ``--token`` or ``$FULMEN_STORE_TOKEN``).
        settings: the environment read once (``Settings.from_env()`` when not given); the
            API keys a config names by variable (``api_key_env``) come from it.
        resume_anyway: train on in a run folder that holds a run of another agent, model or
            data (``fulmen train --resume-anyway``); by default ``fit`` refuses
            (``fulmen.trainer.identity``).
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        store_token: str | None = None,
        settings: Settings | None = None,
        resume_anyway: bool = False,
    ) -> None:
        self.config = config
        self.store_token = store_token
        self.resume_anyway = resume_anyway
        self.settings = settings if settings is not None else Settings.from_env()
        #: what the end of the last ``fit`` decided (``None``: it did not validate)
        self.end_of_run: EndOfRun | None = None
        self.diagnosis: list[Finding] = []  # where the time went, what held it back
        put_first_on_sys_path(config.python_path)

    def fit(
        self,
        agent: Any = None,
        train_data: str | Sequence[Any] | None = None,
        val_data: str | Sequence[Any] | None = None,
    ) -> list[dict[str, float]]:
        """Train; blocks until done and returns the metrics of every step (see ``afit``)."""
        return asyncio.run(self.afit(agent, train_data, val_data))

    async def afit(
        self,
        agent: Any = None,
        train_data: str | Sequence[Any] | None = None,
        val_data: str | Sequence[Any] | None = None,
    ) -> list[dict[str, float]]:
        """Train the agent (default: ``config.agent``) on ``train_data`` (default: config).

        Resumes at the stage and step where an earlier run in the same directory stopped;
        refuses (``IdentityMismatch``) when that run has another agent, model or data, unless
        ``resume_anyway``, and records changed settings as the run's next config version
        (``fulmen.trainer.identity``). At the end the run serves its best validated version
        (``validation.keep_best``) and ``end_of_run`` says what it decided
        (``fulmen.trainer.best``); ``diagnosis`` where the run's time went and what held it
        back (``fulmen.trainer.diagnosis``).
        """
        from fulmen.engines.models import resolve_model
        from fulmen.trainer import best
        from fulmen.trainer.identity import record_start
        from fulmen.trainer.run_record import RunRecorder, new_run
        from fulmen.trainer.stages import last_stage_context, run_stages
        from fulmen.trainer.training_run import TrainingRun
        from fulmen.types import RunStatus

        config = self.config
        self.end_of_run = None
        self.diagnosis = []
        # Before anything starts: another run's folder, a wrong agent or a missing data file
        # fails in a second, not after the engine and gateway are up (nor as "nothing to do").
        state, identity, settings, change = self._check_run_folder(agent, train_data, val_data)
        runs_agent = config.data.from_store is None  # offline training runs no agent
        if runs_agent:
            # As the runner will run it: with the run folder hidden from a command agent.
            check_before_start(_hide_run(agent or config.agent, config.run_dir), config.python_path)
        run_dir = config.run_dir
        train_source = train_data or config.data.train
        train_tasks = (
            config_tasks(config, train_source, "train")
            if runs_agent and train_source is not None
            else []
        )
        val_source = val_data or config.data.val
        val_tasks = config_tasks(config, val_source, "val") if val_source else None
        finished = _finished_plan(config, state)
        if finished is not None:
            logger.warning("%s", finished)
            return []
        if change is not None:
            differs = RunIdentity.model_validate(state.identity).differences(identity)
            if differs:
                logger.warning(
                    "%s: resuming anyway (resume_anyway): %s", config.run_dir, "; ".join(differs)
                )
            logger.info("%s", change.line(config.run_dir))
        # Owner-only: the run folder holds the store (every task and answer), checkpoints and
        # the engine's log; no rollout's user may enter it (docs/security.md).
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(run_dir, 0o700)
        if config.engine.kind == "endpoint":
            # A running endpoint (a hosted model, say) serves prompt-only algorithms: there are
            # no local weights to resolve, and the name is only what requests ask for.
            model_path = Path(config.model)
        else:
            model_path = await asyncio.to_thread(resolve_model, config.model)
        stack = TrainingStack(
            store_url=config.run_store_url(),
            store_token=self.store_token,
            agent=_hide_run(agent or config.agent, run_dir) if runs_agent else None,
            model=config.model,
            engine=config.engine,
            rollouts=config.rollouts,
            log_dir=run_dir,
            cluster=config.cluster,
            python_path=config.python_path,
            weights_roots=[run_dir],
            python=self.settings.python,
        )
        validation = config.validation
        if validation is None or not val_tasks:
            val_tasks = []
        elif validation.max_tasks:
            val_tasks = val_tasks[: validation.max_tasks]
        # Before the engine starts: a W&B login or an MLflow server that does not answer
        # stops the run now. The run's id names it there too (a resume logs on).
        sinks = open_sinks(
            config.metrics,
            run_dir=run_dir,
            run_id=state.run_id,
            run_config=config.model_dump(mode="json"),
            tensorboard=config.tensorboard,
            environ=self.settings.environ,
        )
        with MetricsLogger(run_dir, sinks=sinks) as metrics:
            async with stack:
                record_start(state, identity, settings, change)
                state.save()  # the run's id, before the store names a run by it
                recorder = RunRecorder(stack.store, new_run(config, state.run_id))
                await recorder.start()
                metrics.add_sink(recorder.metrics)
                if change is not None:
                    # The store's run keeps the newest config; this record says from which
                    # step it holds and what it changed.
                    values, labels = config_version_record(change)
                    metrics.log(change.step, values, labels=labels, echo=False)
                training = TrainingRun(
                    config=config,
                    stack=stack,
                    metrics=metrics,
                    state=state,
                    model_path=model_path,
                    train_tasks=train_tasks,
                    val_tasks=val_tasks,
                    uses_stages=config.stages is not None,
                    settings=self.settings,
                    recorder=recorder,
                )
                status = RunStatus.FAILED
                try:
                    history = await run_stages(training)
                    self.end_of_run = await best.end_run(
                        training, last_stage_context(training).rollouts
                    )
                    self.diagnosis = await _diagnose(config, stack)
                    for finding in self.diagnosis:
                        logger.info("diagnosis: %s", finding.line())
                    status = RunStatus.SUCCEEDED
                    return history
                except (KeyboardInterrupt, asyncio.CancelledError):
                    status = RunStatus.STOPPED
                    raise
                finally:
                    await recorder.finish(status)

    def _check_run_folder(
        self,
        agent: Any,
        train_data: str | Sequence[Any] | None,
        val_data: str | Sequence[Any] | None,
    ) -> tuple[RunState, RunIdentity, dict[str, Any], ConfigChange | None]:
        """Return the folder's state, this start's identity and settings, and what changed.

        Raises ``IdentityMismatch`` when the folder holds a run of another agent, model or
        data (unless ``resume_anyway``); reads ``state.json`` only.
        """
        from fulmen.trainer.identity import check_run_folder, run_identity, run_settings

        config = self.config
        state = RunState(config.run_dir)
        identity = run_identity(config, agent, train_data, val_data)
        settings = run_settings(config)
        change = check_run_folder(state, identity, settings, resume_anyway=self.resume_anyway)
        return state, identity, settings, change

    def dev(
        self,
        agent: Any = None,
        tasks: str | Sequence[Any] | None = None,
        *,
        n: int = 4,
        split: Literal["train", "val"] = "train",
        endpoint: str | None = None,
        model: str | None = None,
        out: TextIO | None = None,
        store_url: str | None = None,
    ) -> list[dict[str, Any]]:
        """Run ``n`` rollouts without training and print calls, rewards and transitions.

        Args:
            agent: what to run (default: ``config.agent``).
            tasks: where tasks come from (default: the ``split``'s data).
            n: how many tasks to run.
            split: ``train`` runs training tasks at ``rollouts.train_sampling``, as training
                rollouts run; ``val`` validation tasks at ``rollouts.val_sampling``.
            endpoint: an OpenAI-compatible base URL to use instead of starting the engine.
            model: the model name to request from ``endpoint`` (default: ``config.model``).
            out: where the report goes (default: stdout).
            store_url: a store to keep the rollouts in, to read afterwards (``fulmen
                rollouts list --store``); default: a private in-memory store.
        """
        return asyncio.run(
            self.adev(
                agent,
                tasks,
                n=n,
                split=split,
                endpoint=endpoint,
                model=model,
                out=out or sys.stdout,
                store_url=store_url,
            )
        )

    async def adev(
        self,
        agent: Any = None,
        tasks: str | Sequence[Any] | None = None,
        *,
        n: int = 4,
        split: Literal["train", "val"] = "train",
        endpoint: str | None = None,
        model: str | None = None,
        out: TextIO,
        store_url: str | None = None,
    ) -> list[dict[str, Any]]:
        """Run ``dev`` on the running event loop."""
        from fulmen.trainer.dev import configured_max_seq_len, max_seq_len_option, run_dev

        config = self.config
        if config.data.from_store is not None and agent is None:
            raise ConfigError(
                "fulmen dev runs the agent, and this config trains offline "
                "(data.from_store) without one"
            )
        check_before_start(agent or config.agent, config.python_path)
        source = tasks or (config.data.train if split == "train" else config.data.val)
        if source is None:
            raise ConfigError(
                f"fulmen dev --split {split} needs data.{split} (or tasks passed to dev)"
            )
        chosen = config_tasks(config, source, split)[:n]
        out.write(_dev_header(len(chosen), split, config, given=tasks is not None) + "\n")
        engine = EngineConfig(kind="endpoint", url=endpoint) if endpoint else config.engine
        stack = TrainingStack(
            store_url=store_url or "memory://",
            store_token=self.store_token,
            agent=agent or config.agent,
            model=config.model,
            engine=engine,
            rollouts=config.rollouts,
            log_dir=Path(config.run_dir) / "dev",
            python=self.settings.python,
        )
        async with stack:
            ids = [task_id_of(t, i, config.data.task_id_key) for i, t in enumerate(chosen)]
            return await run_dev(
                stack,
                chosen,
                task_ids=ids,
                model=model or config.model,
                options=config.transition_options(),
                rollouts=config.rollouts,
                mode=Mode.TRAIN if split == "train" else Mode.VAL,
                out=out,
                max_seq_len=configured_max_seq_len(config),
                max_seq_len_option=max_seq_len_option(config),
            )


def config_version_record(change: ConfigChange) -> tuple[dict[str, float], dict[str, str | int]]:
    """Return the metrics (values, labels) of a new config version, logged where it starts."""
    keys = ", ".join(change.keys)
    if len(keys) > 1000:  # a store's text label holds 1,024 characters
        keys = keys[:990] + ", ..."
    return {"config/version": float(change.version)}, {
        "config/changed": keys,
        "config/digest": change.digest,
    }


def _dev_header(n: int, split: str, config: TrainConfig, *, given: bool) -> str:
    """Say which tasks ``fulmen dev`` runs and how it samples them."""
    origin = "the tasks given" if given else f"data.{split}"
    if split == "train":
        sampling = json.dumps(config.rollouts.train_sampling)
        return (
            f"fulmen dev: {n} training tasks ({origin}) sampled as training does "
            f"(rollouts.train_sampling {sampling}); --split val runs validation tasks"
        )
    sampling = json.dumps(config.rollouts.val_sampling)
    return f"fulmen dev: {n} validation tasks ({origin}) at rollouts.val_sampling {sampling}"


def _finished_plan(config: TrainConfig, state: Any) -> str | None:
    """Say so when ``config.run_dir`` already ran its whole plan: a restart would do nothing.

    ``None`` when there is work left (or the last stage's length is not known up front).
    """
    plan = config.plan()
    if not state.path.exists() or state.stage < len(plan) - 1:
        return None
    last = plan[-1]
    planned = last.planned()
    if planned is None or state.step < planned[0] or state.validated_step != state.step:
        return None
    where = "algorithm" if config.stages is None else f"stages.{len(plan) - 1}"
    count, option = planned
    if option == "source":
        return (
            f"{config.run_dir} already trained on its source store ({last.name}, "
            "state.json): nothing to do; to train again, use another run_dir"
        )
    return (
        f"{config.run_dir} already finished its plan ({count} {option} of {last.name}, "
        f"state.json): nothing to do. To train on from it, raise {where}.{option} "
        f"(e.g. --set {where}.{option}={count * 2}); to start over, use another run_dir"
    )


async def _diagnose(config: TrainConfig, stack: TrainingStack) -> list[Finding]:
    """Diagnose the whole run from its metrics and, with the built-in engine, its counters."""
    import httpx

    from fulmen.trainer.diagnosis import diagnose, engine_counters
    from fulmen.trainer.metrics import read_metrics

    records = read_metrics(config.run_dir / "metrics.jsonl")
    engine: dict[str, float] | None = None
    if config.engine.kind == "builtin" and config.cluster is None:
        root = stack.engine_url.removesuffix("/v1")
        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                page = await client.get(f"{root}/metrics")
            engine = engine_counters(page.text) if page.status_code == 200 else None
        except httpx.HTTPError:
            engine = None  # the diagnosis goes on without the engine's counters
    plan = config.plan()
    is_async = any(stage.runs_async() for stage in plan)
    return diagnose(records, is_async=is_async, engine=engine, algorithm=plan[0].name)


def _hide_run(agent: Any, run_dir: Path) -> Any:
    """Return ``agent`` with the run folder among the paths its sandbox hides (``AgentSpec``).

    The run folder holds the store (every task, answers included) and the checkpoints: a
    rollout being trained must not read them, whatever their modes.
    """
    from fulmen.agent.spec import AgentSpec

    return agent.hiding([run_dir]) if isinstance(agent, AgentSpec) else agent
