"""``fulmen export``: training data from a store as JSONL or Parquet.

Kinds: ``transitions`` (token ids, logprobs, masks, credited rewards, as the trainer uses them),
``sft`` (chat conversations, optionally only from rollouts whose reward reaches a minimum) and
``preferences`` (the best and the worst rollout of each task as a chosen/rejected pair).
``--run RUN_ID`` keeps the rollouts of one training run (their ids start with the run's id).
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from fulmen.cli.parsers import add_command, arg
from fulmen.cli.store import add_store_options, open_cli_store, run_async
from fulmen.errors import ConfigError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``export`` subcommand."""
    add_command(
        subparsers,
        "export",
        _export,
        arg("kind", choices=["transitions", "sft", "preferences"]),
        arg("--out", required=True, help="output file (.jsonl or .parquet)"),
        add_store_options,
        arg(
            "--mode",
            choices=["train", "val", "test", "production"],
            help="only this mode (default: every mode; the summary line counts the rollouts "
            "of each)",
        ),
        arg(
            "--run",
            metavar="RUN_ID",
            help="only the rollouts of this training run (see `fulmen runs list`)",
        ),
        arg(
            "--all-statuses",
            action="store_true",
            help="include failed and cancelled rollouts (default: succeeded only)",
        ),
        arg(
            "--agents",
            nargs="+",
            default=["*"],
            metavar="PATTERN",
            help="transitions: agent name patterns to include (default: all)",
        ),
        arg(
            "--merge", action="store_true", help="transitions: merge token-exact consecutive calls"
        ),
        arg("--credit", default="final", help="transitions: credit strategy (default: final)"),
        arg("--min-reward", type=float, help="sft: keep rollouts with reward >= this"),
        help="export transitions, SFT conversations or preference pairs from a store",
        description="Read finished rollouts from a store and write training data. The format "
        "follows the file suffix: .jsonl, or .parquet (needs pyarrow).",
    )


def _export(args: argparse.Namespace) -> int:
    if args.merge and args.credit == "per_call":
        # a merged row carries one reward: the last call's
        raise ConfigError(
            "--credit per_call with --merge would give each merged row only its last call's "
            "reward; leave out --merge to export one row per call with its own reward"
        )
    count, modes = run_async(lambda: _run(args))
    read = ", ".join(f"{n} {mode}" for mode, n in sorted(modes.items())) or "none"
    hint = "" if args.mode or len(modes) < 2 else "; --mode picks one"
    print(f"wrote {count} {args.kind} rows to {args.out} (rollouts read: {read}{hint})")
    return 0


async def _run(args: argparse.Namespace) -> tuple[int, Counter[str]]:
    from fulmen.cli.rollouts import run_rollout_pattern
    from fulmen.store.reading import iter_rollouts
    from fulmen.transitions.export import preference_rows, sft_rows, transition_rows, write_rows
    from fulmen.transitions.trajectory import AttemptRecords, TransitionOptions, load_attempt
    from fulmen.types import Mode, RolloutQuery, RolloutStatus

    options = TransitionOptions(agents=tuple(args.agents), merge=args.merge, credit=args.credit)
    attempts: list[AttemptRecords] = []
    modes: Counter[str] = Counter()
    async with open_cli_store(args) as store:
        pattern = None
        if args.run is not None:
            await store.get_run(args.run)  # NotFound names an unknown run
            pattern = run_rollout_pattern(args.run)
        query = RolloutQuery(
            mode=Mode(args.mode) if args.mode else None,
            statuses=None if args.all_statuses else [RolloutStatus.SUCCEEDED],
            limit=500,
        )
        async for rollout in iter_rollouts(store, query):
            if pattern is not None and not pattern.match(rollout.rollout_id):
                continue
            modes[rollout.mode.value] += 1
            attempts.append(await load_attempt(store, rollout.rollout_id))
    if args.kind == "transitions":
        rows = transition_rows(
            t for attempt in attempts for t in attempt.trajectory(options=options).transitions
        )
    elif args.kind == "sft":
        rows = sft_rows(attempts, min_reward=args.min_reward)
    else:
        rows = preference_rows(attempts)
    write_rows(args.out, rows)
    return len(rows), modes
