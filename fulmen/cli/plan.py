"""``fulmen plan``: what a training config needs in memory per device, before anything starts.

The same plan ``fulmen train`` checks first (``fulmen.trainer.memory_plan``): the engine's
weights, caches and KV budget, each stage's update (weights, trained parameters, optimizer
state, the peak of a full micro-batch and of the longest sequence, with activation
checkpointing and without), and per device what is needed against what is free. Exit code 0
when the run fits (warnings about data that reaches its limits included), 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import TYPE_CHECKING, Any

from fulmen.cli.parsers import add_command, arg, config_overrides, json_flag
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.trainer.config import TrainConfig
    from fulmen.trainer.memory_plan import MemoryPlan

__all__ = ["check_before_training", "register"]

_SET_HELP = "override a config value, e.g. --set algorithm.grpo.micro_batch_tokens=2048"


def register(subparsers: Any) -> None:
    """Add the ``plan`` subcommand."""
    add_command(
        subparsers,
        "plan",
        _plan,
        arg("config", help="path to the YAML config"),
        config_overrides(_SET_HELP),
        arg(
            "--memory",
            metavar="SIZE",
            help="plan for a host with this much free memory (e.g. 16GiB, 64GB) instead of "
            "this machine's",
        ),
        arg(
            "--gpu-memory",
            metavar="SIZE",
            help="plan for GPUs with this much free memory each (e.g. 80GiB) instead of the "
            "ones torch sees here",
        ),
        json_flag("print the plan as JSON (sizes in bytes)"),
        help="say what a config's run needs in memory per device, and whether it fits",
        description=textwrap.fill(
            "Plan the memory of a training config's run without starting it: the engine "
            "(weights, prefix cache, one prefill chunk, its running KV up to the budget) and "
            "each stage's update (weights, trained parameters, optimizer state, and the peak of "
            "a full micro-batch and of the longest sequence, with activation checkpointing and "
            "without), measured by running their code on the meta device, so nothing is "
            "allocated. Each device's need is compared with its free memory: what is held "
            "whatever the data must fit (else exit 1, with the setting to change); what only "
            "the longest data reaches is a warning. `fulmen train` checks the same plan first."
        ),
    )


def _plan(args: argparse.Namespace) -> int:
    from fulmen.trainer.config import load_config
    from fulmen.trainer.memory_plan import plan_memory

    config = load_config(args.config, overrides=args.set)
    available: dict[str, int] = {}
    if args.memory:
        available["cpu"] = _size_arg("--memory", args.memory)
    if args.gpu_memory:
        available["cuda"] = _size_arg("--gpu-memory", args.gpu_memory)
    plan = plan_memory(config, available=available)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        _print(plan)
    return 0 if plan.fits else 1


def check_before_training(config: TrainConfig) -> None:
    """Plan ``config``'s memory, print it, and refuse a run that cannot fit.

    Only what the run does is planned; when it does not fit, the plan is made again with each
    micro-batch's alternative, so the advice can quote it. A model whose code cannot run on the
    meta device is started without a plan, with a warning.

    Raises:
        ConfigError: a device's fixed need is over its free memory; the message names the
            largest items and the settings to change.
    """
    from fulmen.trainer.memory_plan import MemoryPlanUnavailable, plan_memory

    try:
        plan = plan_memory(config, alternatives=False)
    except MemoryPlanUnavailable as exc:
        print(f"warning: {exc.message}; starting without a memory plan", flush=True)
        return
    if plan.problems:
        plan = plan_memory(config, alternatives=True)
    _print(plan, problems=False)
    if plan.problems:
        raise ConfigError(
            "the run does not fit in memory: "
            + " | ".join(plan.problems)
            + " (`fulmen plan CONFIG` shows the whole plan; --skip-memory-plan starts anyway)"
        )


def _print(plan: MemoryPlan, *, problems: bool = True) -> None:
    for line in plan.lines():
        print(line, flush=True)
    for warning in plan.warnings:
        print(f"warning: {warning}", flush=True)
    if problems:  # fulmen train raises them instead
        for problem in plan.problems:
            print(f"does not fit: {problem}", flush=True)


def _size_arg(flag: str, text: str) -> int:
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        size = int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError as exc:
        raise ConfigError(f"{flag} {text!r} is not a size (e.g. 16GiB, 64GB, 512MiB)") from exc
    if size <= 0:
        raise ConfigError(f"{flag} must be positive, got {text!r}")
    return size
