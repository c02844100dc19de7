"""``fulmen replay ROLLOUT_ID``: run the agent again on a rollout with its recorded replies.

The agent comes from ``--config`` (its ``agent``, ``python_path`` and ``rollouts`` settings) or
``--agent``; the task, resources and model replies come from the store. Exits 0 when the
replay repeated the run (no diverging request, every recorded reply used, the same reward)
and 1 otherwise. See ``fulmen.debugging.replay``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fulmen.cli.parsers import add_command, arg, json_flag, python_path_option
from fulmen.cli.store import add_store_options, run_in_store

__all__ = ["register"]


def _replay(args: argparse.Namespace) -> int:
    from fulmen.agent.rollouts import RolloutSettings
    from fulmen.debugging.replay import format_replay, replay_rollout
    from fulmen.errors import ConfigError
    from fulmen.importing import put_first_on_sys_path
    from fulmen.trainer.config import load_config
    from fulmen.trainer.preflight import check_before_start

    config = load_config(args.config) if args.config else None
    agent = args.agent or (config.agent if config else None)
    if agent is None:
        raise ConfigError("fulmen replay needs the agent: pass --config CONFIG or --agent SPEC")
    python_path = [*(config.python_path if config else []), *args.python_path, Path(".")]
    put_first_on_sys_path(python_path)
    check_before_start(agent, python_path)
    rollouts = config.rollouts if config else RolloutSettings()
    if args.timeout is not None:
        rollouts = rollouts.model_copy(update={"timeout_s": args.timeout})

    report = run_in_store(
        args,
        lambda store: replay_rollout(
            store,
            args.rollout_id,
            agent=agent,
            rollouts=rollouts,
            attempt_id=args.attempt,
            on_divergence=args.on_divergence,
        ),
    )
    if args.json:
        print(json.dumps({**asdict(report), "is_faithful": report.is_faithful}, indent=2))
    else:
        print(format_replay(report))
    return 0 if report.is_faithful else 1


def register(subparsers: Any) -> None:
    """Add the ``replay`` subcommand."""
    add_command(
        subparsers,
        "replay",
        _replay,
        arg("rollout_id", metavar="ROLLOUT_ID", help="the rollout to replay"),
        add_store_options,
        arg("--config", metavar="CONFIG", help="training config naming the agent and python_path"),
        arg("--agent", metavar="SPEC", help="the agent as module:object (overrides the config's)"),
        python_path_option(
            "directory to import the agent from (repeatable; added to the config's; the "
            "current directory is included)"
        ),
        arg("--attempt", metavar="ID", help="attempt to replay (default: the latest)"),
        arg(
            "--on-divergence",
            choices=("stop", "serve"),
            default="stop",
            help="what a request that differs from the recording gets: stop = an error "
            "(replay_diverged) so the agent fails there (default); serve = the next recorded "
            "reply anyway, so the agent runs to its end",
        ),
        arg(
            "--timeout",
            type=float,
            metavar="SECONDS",
            help="limit of the replayed attempt (default: the config's rollouts.timeout_s)",
        ),
        json_flag("print the report as JSON"),
        help="run the agent again on a stored rollout, every model reply served from the record",
        description="Re-run the agent on a rollout's task with each model reply served from the "
        "rollout's recorded calls (no model needed), through the normal gateway and runner on a "
        "private in-memory store. Reports the first request that differs from the recorded one "
        "(with a diff), how many recorded replies were used, and the reward the agent computes now "
        "next to the recorded one. Exits 1 when anything differs. The store is only read.",
    )
