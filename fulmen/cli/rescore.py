"""``fulmen rescore``: a new reward function, or a judge's rubric, over stored rollouts.

With ``--reward module:fn`` the function receives each selected rollout as a
``fulmen.debugging.RecordedRollout`` (task, recorded calls, ``final_text``) and returns a
number; the agent does not run. Prints the old and new reward distributions and the rollouts
that changed most. Read-only unless ``--write NAME`` stores the new values as the named reward
``NAME`` (``--primary`` makes it the rollouts' reward). See ``fulmen.debugging.rescore``.

With ``--judge FILE`` the ``reward:`` section of a YAML file (a training config, or that
section alone) scores them instead, as training does, and each scored rollout's criteria and
primary are posted as its reward unless ``--dry-run``. See ``fulmen.debugging.rescore_judge``.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fulmen.cli.parsers import add_command, arg, json_flag, one_of, python_path_option
from fulmen.cli.store import add_store_options, open_cli_store, parse_duration, run_async

__all__ = ["register"]


def _since(text: str) -> datetime:
    """Parse an ISO 8601 time (UTC when it names no zone) or an age such as ``2h``."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return datetime.now(UTC) - timedelta(seconds=parse_duration(text))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _selection(args: argparse.Namespace) -> Any:
    from fulmen.debugging.rescore import RescoreFilter
    from fulmen.types import Mode

    return RescoreFilter(
        mode=Mode(args.mode) if args.mode else None,
        task_id=args.task,
        resources_version=args.resources_version,
        since=args.since,
        limit=args.limit,
    )


def _rescore(args: argparse.Namespace) -> int:
    from fulmen.debugging.rescore import load_reward_function, rescore, write_rewards
    from fulmen.debugging.rescore_report import format_rescore, rescore_summary
    from fulmen.errors import ConfigError

    if args.judge is not None:
        return _rescore_with_judge(args)
    if args.cache is not None:
        raise ConfigError("--cache only applies with --judge FILE")
    if args.primary and not args.write:
        raise ConfigError("--primary only applies with --write NAME")
    if args.dry_run and args.write:
        raise ConfigError("--dry-run and --write contradict each other")
    reward = load_reward_function(args.reward, python_path=[Path("."), *args.python_path])
    selection = _selection(args)

    async def main() -> tuple[Any, int]:
        async with open_cli_store(args) as store:
            result = await rescore(store, reward, selection)
            posted = 0
            if args.write:
                posted = await write_rewards(
                    store, result, name=args.write, primary=args.primary, source=args.reward
                )
            return result, posted

    result, posted = run_async(main)
    if args.json:
        print(json.dumps({**rescore_summary(result, top=args.top), "written": posted}, indent=2))
    else:
        print(format_rescore(result, top=args.top))
        if args.write:
            print(f"\nwrote {posted} rewards named {args.write!r}")
    return 0


def _rescore_with_judge(args: argparse.Namespace) -> int:
    from fulmen.debugging.rescore_judge import load_reward_config, rescore_with_judge
    from fulmen.debugging.rescore_report import format_rescore, rescore_summary
    from fulmen.errors import ConfigError
    from fulmen.importing import put_first_on_sys_path
    from fulmen.rewards.cache import JudgeCache
    from fulmen.rewards.scoring import RewardJudge
    from fulmen.settings import Settings

    if args.write or args.primary:
        raise ConfigError(
            "--write and --primary apply to --reward; --judge posts the rubric's rewards "
            "(each criterion and the primary) unless --dry-run"
        )
    config, python_path = load_reward_config(args.judge)
    put_first_on_sys_path([Path("."), *args.python_path, *python_path])
    api_key = None
    if config.judge is not None and config.judge.api_key_env is not None:
        api_key = Settings.from_env().variable(config.judge.api_key_env)
        if not api_key:
            raise ConfigError(
                f"reward.judge.api_key_env in {args.judge} names ${config.judge.api_key_env}, "
                "which is not set"
            )
    cache = JudgeCache(args.cache)

    async def main() -> Any:
        async with open_cli_store(args) as store:
            record = None if args.dry_run else store.add_llm_calls
            async with RewardJudge(config, api_key=api_key, cache=cache, record=record) as judge:
                return await rescore_with_judge(
                    store, judge, _selection(args), is_dry_run=args.dry_run
                )

    result = run_async(main)
    if args.json:
        print(json.dumps(rescore_summary(result, top=args.top), indent=2))
    else:
        print(format_rescore(result, top=args.top))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``rescore`` subcommand."""
    add_command(
        subparsers,
        "rescore",
        _rescore,
        one_of(
            arg("--reward", metavar="MODULE:FN", help="the new reward function"),
            arg(
                "--judge",
                type=Path,
                metavar="FILE",
                help="a YAML file whose reward: section (judge and criteria) scores the rollouts: "
                "a training config as it is, or that section alone; posts each scored rollout's "
                "criteria and weighted mean as its reward unless --dry-run",
            ),
        ),
        add_store_options,
        python_path_option(
            "directory to import the function from (repeatable; the current one is included)"
        ),
        arg("--mode", choices=("train", "val", "test", "production"), help="only this mode"),
        arg("--task", metavar="TASK_ID", help="only rollouts of this task"),
        arg("--resources-version", type=int, metavar="N", help="only rollouts run on this version"),
        arg(
            "--since",
            type=_since,
            metavar="TIME",
            help="only rollouts that ended since TIME: ISO 8601 (UTC if no zone) or an age "
            "(12h, 7d)",
        ),
        arg("--limit", type=_positive, default=1000, help="most rollouts to score (default 1000)"),
        arg(
            "--top",
            type=_positive,
            default=10,
            help="rollouts to list: the most changed, or with --judge each one's scores "
            "(default 10)",
        ),
        arg(
            "--write",
            metavar="NAME",
            help="store each changed rollout's new value as the reward value NAME (through the "
            "reward API; idempotent). The rollout's reward stays what it was unless --primary",
        ),
        arg(
            "--primary",
            action="store_true",
            help="with --write: make NAME the rollouts' reward (what training and exports read)",
        ),
        arg(
            "--dry-run",
            action="store_true",
            help="with --judge: score and report, but store nothing (no rewards, no call records)",
        ),
        arg(
            "--cache",
            type=Path,
            metavar="FILE",
            help="with --judge: keep the judge's answers in this JSON lines file and reuse those "
            "already there (a training run's RUN_DIR/judge-cache.jsonl works); default: none kept",
        ),
        json_flag("print the summary as JSON"),
        help="apply a new reward function or a judge's rubric to stored rollouts and compare",
        description="Apply a reward function to the succeeded rollouts of a store, without running "
        "the agent: it receives each rollout's task and recorded calls "
        "(fulmen.debugging.RecordedRollout) and returns a number. Prints the old and new "
        "reward distributions (counts, means, a histogram) and the rollouts that changed "
        "most. Read-only unless --write. With --judge FILE a judge scores them on the "
        "rubric of FILE's reward: section instead, as training does, and the scores are "
        "posted as their rewards unless --dry-run.",
    )
