"""``fulmen train CONFIG.yaml`` and ``fulmen dev CONFIG.yaml``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shlex
import signal
import sys
import textwrap
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from fulmen.cli.parsers import add_command, arg, config_overrides, json_flag
from fulmen.cli.store import STORE_TOKEN_OPTION

__all__ = ["register"]

_T = TypeVar("_T")

_SET_HELP = (
    "override a config value, e.g. --set algorithm.steps=3 (value parsed as YAML; repeatable)"
)


def register(subparsers: Any) -> None:
    """Add the ``train`` and ``dev`` subcommands."""
    from fulmen.algorithms.registry import registered

    add_command(
        subparsers,
        "train",
        _train,
        arg("config", help="path to the YAML config"),
        config_overrides(_SET_HELP),
        arg(
            "--store",
            metavar="URL",
            help="external store instead of RUN_DIR/store.db (sets store_url): http://host:port of "
            "a `fulmen store serve`, or postgresql://...",
        ),
        STORE_TOKEN_OPTION,
        arg(
            "--resume-anyway",
            action="store_true",
            help="continue the run in RUN_DIR even though it was started with another agent, model "
            "or data (by default such a start is refused; changed hyperparameters are always "
            "resumed and recorded as a new config version)",
        ),
        arg(
            "--skip-memory-plan",
            action="store_true",
            help="start without checking the memory plan first (`fulmen plan CONFIG`; by default "
            "a run whose fixed memory need is over what is free is refused)",
        ),
        arg(
            "--no-dashboard",
            dest="dashboard",
            action="store_false",
            help="do not serve the dashboard (served by default on 127.0.0.1 while training)",
        ),
        arg(
            "--dashboard-port",
            type=int,
            default=0,
            metavar="PORT",
            help="port of the dashboard (default: any free one; the URL is printed)",
        ),
        help="train an agent end to end (store, engine, gateway, runners, then the algorithm)",
        description=textwrap.fill(
            "Start the embedded SQLite store, the inference engine, the gateway and a runner, "
            "then improve the agent with the config's algorithm or its stages, one after the "
            "other. Progress, rewards and step times go to the console; metrics to "
            "RUN_DIR/metrics.jsonl (and TensorBoard). RUN_DIR is the config's run_dir, or "
            "runs/<config file name> beside the config. Running it again with the same run_dir "
            "resumes at the stage and step it stopped at; a config of another agent, model or "
            "data is refused there (--resume-anyway)."
        ),
        # Raw, so the table keeps its lines (the description is wrapped above).
        epilog="algorithms (algorithm.name):\n"
        + "\n".join(f"  {a.name:<7} {a.summary}" for a in registered()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_command(
        subparsers,
        "dev",
        _dev,
        arg("config", help="path to the YAML config"),
        arg("-n", type=int, default=4, help="number of tasks to run (default 4)"),
        arg(
            "--split",
            choices=("train", "val"),
            default="train",
            help="train (default): training tasks, sampled as training samples them "
            "(rollouts.train_sampling); val: validation tasks at rollouts.val_sampling",
        ),
        arg("--endpoint", help="OpenAI-compatible base URL to use instead of the engine"),
        arg("--model", help="model name to request from --endpoint"),
        json_flag("also print the summary as JSON"),
        arg(
            "--store",
            metavar="URL",
            help="keep the rollouts in this store, to read afterwards with `fulmen rollouts` or "
            "the dashboard: a file path or sqlite:///path.db (created if missing), "
            "postgresql://..., or http://host:port of a `fulmen store serve` (default: a "
            "private in-memory store)",
        ),
        STORE_TOKEN_OPTION,
        config_overrides(_SET_HELP),
        help="run a few rollouts and print calls, rewards and transitions (no training)",
        description="Dry run: execute a few rollouts with the configured model (or any "
        "OpenAI-compatible endpoint) and print every call, reward and transition. Exits 1 "
        "when every rollout failed.",
    )


def _train(args: argparse.Namespace) -> int:
    from fulmen.cli.store import cli_settings
    from fulmen.trainer.config import load_config
    from fulmen.trainer.metrics import read_metrics
    from fulmen.trainer.state import RunState
    from fulmen.trainer.trainer import Trainer

    overrides = [*args.set, f"store_url={args.store}"] if args.store else args.set
    config = load_config(args.config, overrides=overrides)
    if _is_torchrun_update_rank():
        return _update_rank(config)
    if not args.skip_memory_plan:
        from fulmen.cli.plan import check_before_training

        check_before_training(config)
    settings = cli_settings(args)
    token = args.token or settings.store_token
    trainer = Trainer(
        config, store_token=token, settings=settings, resume_anyway=args.resume_anyway
    )
    work = trainer.afit()
    if args.dashboard:
        work = _with_dashboard(work, config, token, port=args.dashboard_port)
    received: list[int] = []
    try:
        history = asyncio.run(_until_signal(work, received))
    except (asyncio.CancelledError, KeyboardInterrupt) as exc:
        # KeyboardInterrupt: a second Ctrl-C while the first one stopped the run
        print(_resume_line(config.run_dir, _command(args)), flush=True)
        default = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
        return 128 + (received[0] if received else default)
    records = read_metrics(config.run_dir / "metrics.jsonl")
    train = [r["reward/mean"] for r in records if r.get("reward/mean") is not None]
    val = [r for r in records if r.get("val/reward_mean") is not None]
    # Steps as the run's state counts them (every stage's, across restarts): an algorithm's
    # records need not carry reward/mean.
    state = RunState(config.run_dir)
    print(f"done: {len(history)} steps in this run, {state.step_offset + state.step} in all")
    if train:
        print(f"train reward: first step {train[0]:.3f} -> last step {train[-1]:.3f}")
    if val and (trainer.end_of_run is None or trainer.end_of_run.baseline is None):
        print(f"validation reward: before {_val(val[0])} -> after {_val(val[-1])}")
    if trainer.end_of_run is not None:
        for line in trainer.end_of_run.summary():
            print(line)
    # The diagnosis is logged once by the trainer (stderr), not printed here again: output sent
    # to one file (CI, nohup) held every diagnosis line twice.
    print(f"metrics: {config.run_dir / 'metrics.jsonl'}")
    run_id = state.run_id
    store = config.run_store_url()
    print(f"run: {run_id} in the store (fulmen runs show {run_id} --store {store})")
    return 0


def _val(record: dict[str, Any]) -> str:
    """Format a validation's mean reward with how many of its rollouts failed (left out)."""
    failed = int(record.get("val/failed", 0))
    mean = record["val/reward_mean"]
    if failed and mean != mean:  # NaN: no rollout gave a reward
        return "none (every validation rollout failed)"
    return f"{mean:.3f}" + (f" ({failed} validation rollouts failed)" if failed else "")


def _is_torchrun_update_rank() -> bool:
    from fulmen.algorithms.parallel.config import torchrun_rank

    launched = torchrun_rank()
    return launched is not None and launched[0] != 0


def _update_rank(config: Any) -> int:
    """Under ``torchrun``, ranks other than 0 only take updates (``docs/data-parallel.md``)."""
    from fulmen.algorithms.parallel.workers import run_torchrun_rank

    found = (stage.data_parallel_settings() for stage in config.plan())
    settings = next((s for s in found if s is not None), None)
    run_torchrun_rank(settings)
    return 0


def _with_dashboard(
    work: Coroutine[Any, Any, _T], config: Any, token: str | None, *, port: int = 0
) -> Coroutine[Any, Any, _T]:
    """Wrap the run so the dashboard over its store is served (and its URL printed) meanwhile."""
    from fulmen.cli.store import store_options
    from fulmen.dashboard.debug_api import DebugTools
    from fulmen.dashboard.server import serve_dashboard_while

    url = config.run_store_url()  # the trainer's own
    return serve_dashboard_while(
        work,
        store_url=url,
        # read-only: the run's own store runs the watchdog
        store_options=store_options(url, token) or {"watchdog_interval": None},
        announce=lambda address: print(f"dashboard: {address}", flush=True),
        port=port,
        token=token,
        transition_options=config.transition_options(),
        debug=DebugTools(config=config),  # replay and A/B with the run's own agent and tasks
    )


async def _until_signal(work: Coroutine[Any, Any, _T], received: list[int]) -> _T:
    """Await ``work``; SIGTERM or SIGINT stops it within seconds, at the next safe point.

    The signal cancels the run's task (the engine, gateway and store are stopped cleanly) and
    sets the run's stop event (``fulmen.algorithms.stopping``), which an update running on a
    worker thread checks before every layer: it ends there without an optimizer step, so the
    run directory keeps the checkpoint of the last finished step and the next ``fulmen
    train`` resumes from it. The signal's number is appended to ``received``; a second signal
    is handled by Python's default (SIGINT: ``KeyboardInterrupt``).
    """
    from fulmen.algorithms.stopping import stop_scope

    loop = asyncio.get_running_loop()
    with stop_scope(threading.Event()) as stop:
        task = asyncio.ensure_future(work)  # its context, and its threads', carry ``stop``

    quieted: dict[str, int] = {}

    def on_signal(number: int) -> None:
        received.append(number)
        stop.set()
        task.cancel()
        _quiet_abandoned_rollouts(quieted)
        for other in _STOP_SIGNALS:  # a second signal is not swallowed
            loop.remove_signal_handler(other)
        print(
            f"received {signal.Signals(number).name}: stopping at the next safe point "
            "(an update stops before its next layer; the last finished step's checkpoint is "
            "kept)",
            file=sys.stderr,
            flush=True,
        )

    for number in _STOP_SIGNALS:
        loop.add_signal_handler(number, on_signal, number)
    try:
        return await task
    finally:
        for number in _STOP_SIGNALS:
            loop.remove_signal_handler(number)
        for name, level in quieted.items():
            logging.getLogger(name).setLevel(level)


#: The loggers of a run's rollouts: their agents' model calls, the runner and the gateway.
_ROLLOUT_LOGGERS = ("openai", "httpx", "httpcore", "fulmen.agent", "fulmen.gateway")


def _quiet_abandoned_rollouts(saved: dict[str, int]) -> None:
    """Silence the loggers of the rollouts a stopping run abandons; ``saved`` keeps the levels.

    A stop cancels the run with rollouts in flight; their model calls then fail (retries,
    connection errors, gateway flushes) one line each, which buried the line saying how to
    resume. The next start cancels those rollouts in the store, so their failures are no news.
    Levels, not handler filters: a progress bar swaps the root handlers while it runs.
    """
    for name in _ROLLOUT_LOGGERS:
        logger = logging.getLogger(name)
        saved.setdefault(name, logger.level)
        logger.setLevel(logging.CRITICAL + 1)


#: The signals that stop a run at its next safe point.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _command(args: argparse.Namespace) -> str:
    """Return the ``fulmen train`` command line of ``args`` (run it again to resume)."""
    words = ["fulmen", "train", str(args.config)]
    for override in args.set:
        words += ["--set", override]
    if args.store:
        words += ["--store", args.store]
    if args.resume_anyway:
        words.append("--resume-anyway")
    return " ".join(shlex.quote(w) for w in words)


def _resume_line(run_dir: Any, command: str) -> str:
    """Say where the stopped run resumes from, and the command that resumes it."""
    from fulmen.trainer.state import RunState

    state = RunState(run_dir)
    kept = (
        f"the checkpoint of step {state.step} ({run_dir / state.checkpoint}) is kept"
        if state.checkpoint
        else "no step had finished, so the run starts over"
    )
    return f"stopped; {kept}. Resume with the same command: {command}"


def _dev_store(given: str | None) -> str | None:
    """Return the store URL ``fulmen dev --store`` names (a path without a scheme: SQLite)."""
    if not given:
        return None
    if "://" in given:
        return given
    return f"sqlite:///{Path(given).expanduser().resolve()}"


def _dev(args: argparse.Namespace) -> int:
    from fulmen.cli.store import cli_settings
    from fulmen.trainer.config import load_config
    from fulmen.trainer.trainer import Trainer

    if args.n < 1:
        raise SystemExit("fulmen dev: -n must be at least 1")
    config = load_config(args.config, overrides=args.set)
    store = _dev_store(args.store)
    token = args.token or cli_settings(args).store_token if store else None
    report = Trainer(config, store_token=token).dev(
        n=args.n, split=args.split, endpoint=args.endpoint, model=args.model, store_url=store
    )
    if args.json:
        print(json.dumps(report))
    if store:
        print(f"fulmen dev: {len(report)} rollouts kept (fulmen rollouts list --store {store})")
    from fulmen.trainer.dev import dev_failure

    reason = dev_failure(report)  # every rollout failed, or none produced a reward
    if reason is not None:
        print(f"fulmen dev: {reason}", file=sys.stderr)
        return 1
    return 0
