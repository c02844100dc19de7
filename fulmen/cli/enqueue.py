"""``fulmen rollouts enqueue``: put tasks from a file on a store's queue for runners to claim.

Each task (a JSONL line, or an item of ``module:callable``'s list) becomes ``--group-size``
rollouts with the same task id, so GRPO can compare the group's rewards. With ``--resources``
the file is published first as a new resources version and the rollouts point at it; without
it they use the store's latest version.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from fulmen.cli.parsers import add_command, arg, json_flag
from fulmen.cli.store import add_store_options, open_cli_store, run_async
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.types import Rollout, RolloutCreate

__all__ = ["register_enqueue"]


def _creates(
    args: argparse.Namespace, tasks: list[Any], version: int | None
) -> list[RolloutCreate]:
    from pydantic import ValidationError

    from fulmen.trainer.data import task_id_of
    from fulmen.types import Mode, RolloutConfig, RolloutCreate

    try:
        config = RolloutConfig(timeout_s=args.timeout, max_attempts=args.max_attempts)
    except ValidationError as exc:
        bad = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid --timeout/--max-attempts: {bad}") from exc
    return [
        RolloutCreate(
            input=task,
            mode=Mode(args.mode),
            task_id=task_id_of(task, index, args.task_id_key),
            # A fixed id makes running the same command again a no-op instead of a duplicate.
            rollout_id=f"{args.id_prefix}-t{index}-r{j}" if args.id_prefix else None,
            resources_version=version,
            config=config,
        )
        for index, task in enumerate(tasks)
        for j in range(args.group_size)
    ]


def _enqueue(args: argparse.Namespace) -> int:
    from fulmen.cli.resources import read_resources_file
    from fulmen.trainer.data import load_tasks

    if args.group_size < 1:
        raise ConfigError(f"--group-size must be at least 1, got {args.group_size}")
    tasks = load_tasks(args.tasks)
    resources = read_resources_file(args.resources) if args.resources else None

    async def main() -> tuple[list[Rollout], int | None]:
        async with open_cli_store(args, create=True) as store:
            if resources is not None:
                version: int | None = (await store.add_resources(resources)).version
            else:
                latest = await store.latest_resources()
                version = latest.version if latest is not None else None
            return await store.enqueue(_creates(args, tasks, version)), version

    created, version = run_async(main)
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in created], indent=2))
        return 0
    where = f"resources v{version}" if version is not None else "no resources"
    print(
        f"enqueued {len(created)} rollouts ({len(tasks)} tasks x {args.group_size}, "
        f"mode {args.mode}, {where})"
    )
    if version is None:
        print(
            "warning: the store has no resources, so agents get no `llm`; publish one with "
            "`fulmen resources add FILE.yaml` or pass --resources FILE.yaml",
            file=sys.stderr,
        )
    print("watch them: fulmen rollouts list" + (f" --store {args.store}" if args.store else ""))
    return 0


def register_enqueue(commands: Any) -> None:
    """Add ``enqueue`` under ``fulmen rollouts``."""
    add_command(
        commands,
        "enqueue",
        _enqueue,
        add_store_options,
        arg(
            "--tasks",
            required=True,
            metavar="FILE.jsonl",
            help="one task (the agent's `task`) per line, or module:callable returning a list",
        ),
        arg(
            "--resources",
            metavar="FILE.yaml",
            help="publish this resources file first and use its version "
            "(default: the store's latest; see `fulmen resources add --help`)",
        ),
        arg("--mode", choices=["train", "val", "test"], default="train", help="default: train"),
        arg(
            "--group-size",
            type=int,
            default=1,
            metavar="N",
            help="rollouts per task, sharing its task id (default: 1)",
        ),
        arg("--task-id-key", default="id", help="task field used as task id (default: id)"),
        arg("--timeout", type=float, metavar="SECONDS", help="wall-clock limit of one attempt"),
        arg("--max-attempts", type=int, default=1, help="attempts per rollout (default: 1)"),
        arg(
            "--id-prefix",
            metavar="PREFIX",
            help="name rollouts PREFIX-tI-rJ, so enqueueing the same file again adds nothing",
        ),
        json_flag("print the rollouts as JSON"),
        help="enqueue tasks from a JSONL file for runners to claim",
        description="Enqueue one rollout per task (times --group-size) for runners to claim. "
        "With --resources the file is published first and the rollouts use its version; "
        "without it they use the store's latest resources.",
        epilog="example:\n"
        "  fulmen rollouts enqueue --store http://127.0.0.1:4747 --tasks tasks.jsonl \\\n"
        "      --resources resources.yaml --group-size 4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
