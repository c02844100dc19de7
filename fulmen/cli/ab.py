"""``fulmen ab CONFIG --prompt A --prompt B -n N``: compare two prompt versions on the same tasks.

Runs the config's agent on its first N validation tasks once with each prompt, through the
normal runner path (engine, gateway, runner; a private in-memory store), and prints both mean
rewards, the paired difference with a 95% confidence interval, a paired t-test, an exact sign
test and a sign-flip permutation test. See ``fulmen.debugging.ab``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from fulmen.cli.parsers import add_command, arg, config_overrides, json_flag
from fulmen.cli.store import add_store_options, open_cli_store, run_async

__all__ = ["register"]


def _ab(args: argparse.Namespace) -> int:
    from fulmen.debugging.ab import ab_from_config, format_ab, is_store_ref, resolve_prompt
    from fulmen.errors import ConfigError
    from fulmen.importing import put_first_on_sys_path
    from fulmen.prompts import PromptVersion, load_prompt_versions
    from fulmen.trainer.config import load_config

    if len(args.prompt) != 2:
        raise ConfigError(f"give --prompt exactly twice (A and B), got {len(args.prompt)}")
    if args.n < 2:
        raise ConfigError(f"-n must be at least 2, got {args.n}")
    config = load_config(args.config, overrides=args.set)
    put_first_on_sys_path(config.python_path)  # a module:attribute prompt may live beside the agent

    async def main() -> Any:
        versions: list[PromptVersion] = []
        if any(is_store_ref(ref) for ref in args.prompt):
            async with open_cli_store(args) as store:
                versions = await load_prompt_versions(store)
        a, b = (resolve_prompt(ref, versions) for ref in args.prompt)
        labels = (args.prompt[0], args.prompt[1])
        return await ab_from_config(
            config, (a, b), labels=labels, n=args.n, split=args.tasks, name=args.name
        )

    result = run_async(main)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(format_ab(result, alpha=args.alpha))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``ab`` subcommand."""
    add_command(
        subparsers,
        "ab",
        _ab,
        arg("config", help="path to the YAML training config"),
        arg(
            "--prompt",
            action="append",
            default=[],
            required=True,
            metavar="REF",
            help="a prompt: give it twice, A then B (a store version is read from --store)",
        ),
        arg("-n", type=int, default=16, help="tasks to run (default 16)"),
        arg(
            "--tasks",
            choices=("val", "train"),
            default="val",
            help="which tasks: the config's validation data (default; train when it has none) or "
            "training data",
        ),
        arg("--name", default="prompt", help="the resource name the agent receives the prompt by"),
        arg("--alpha", type=float, default=0.05, help="significance level of the verdict (0.05)"),
        config_overrides("override a config value, e.g. --set engine.max_batch=16 (repeatable)"),
        add_store_options,
        json_flag("print the result as JSON"),
        help="A/B test two prompt versions on the same tasks (paired difference, CI, tests)",
        description="Run the config's agent on the same N tasks with prompt A and with prompt B "
        "(validation sampling) and compare the rewards task by task: both means, the paired "
        "difference B - A with a 95% confidence interval, a paired t-test, an exact sign test and "
        "a sign-flip permutation test. A prompt is a .json/.yaml file of a PromptTemplate, "
        "module:attribute, or a prompt version in --store (NAME, VERSION or NAME@VERSION).",
    )
