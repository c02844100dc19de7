"""The race's settings: its command line, what a recorded race depends on, the task prompt."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DESCRIPTION = "fulmen (fulmen train) against TRL's GRPOTrainer on Reasoning Gym, on one wall clock"
CI_ARITHMETIC = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
#: What the recorded figures depend on, beside the dataset, trainer, rate and seed of a row.
SETTINGS = (
    "dataset_config",
    "model",
    "budget_min",
    "marks",
    "group_size",
    "tasks_per_step",
    "completion_length",
    "heldout",
    "train_size",
    "lora_r",
    "lora_targets",
    "answer_format",
    "examples",
    "fulmen_set",
    "trl_set",
    "max_steps",
)
#: Settings added after races were recorded, with the value those races ran with.
ADDED_SETTINGS: dict[str, Any] = {"trl_set": []}
#: The base model's held-out accuracy a dataset should have for the race (issue's range).
SCREEN_RANGE = (0.05, 0.60)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The race's options; ``--ci`` sets the tiny two-step race; a bad ``--trl-set`` exits 2."""
    p = argparse.ArgumentParser(description=DESCRIPTION)
    p.add_argument("--dataset", action="append", help="Reasoning Gym dataset (repeatable)")
    p.add_argument("--dataset-config", default="{}", help="JSON config of the dataset(s)")
    p.add_argument("--model", default="gemma-3-270m", help="fulmen model name or HF directory")
    p.add_argument("--budget-min", type=float, default=30.0, help="training wall clock, minutes")
    p.add_argument("--marks", default="0,5,10,20,30", help="minutes to measure at")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--lrs", default="1e-5,5e-5", help="the learning-rate grid (both trainers)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tasks-per-step", type=int, default=4)
    p.add_argument("--completion-length", type=int, default=32)
    p.add_argument("--heldout", type=int, default=128)
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj")
    p.add_argument(
        "--answer-format",
        default="tag",
        choices=["raw", "tag"],
        help="tag: the last <answer>...</answer> of the reply (a base model does not stop by "
        "itself after a raw answer)",
    )
    p.add_argument(
        "--examples",
        type=int,
        default=3,
        help="worked examples before each question (Gemma 3 270M copies the prompt without)",
    )
    p.add_argument("--trainers", default="trl,fulmen")
    p.add_argument(
        "--fulmen-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for fulmen's runs (repeatable), e.g. to race a sparse-reward "
        "setting: 'algorithm.dynamic_sampling={redraw: true}'",
    )
    p.add_argument(
        "--trl-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a GRPOConfig field for TRL's runs (repeatable; the value is YAML), e.g. to time "
        "TRL without its default activation checkpointing: gradient_checkpointing=false",
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--versus",
        type=Path,
        metavar="BASE",
        help="another race's OUT, run with the same settings but --fulmen-set/--trl-set: "
        "fulmen's runs here are compared with fulmen's there, seed by seed (a setting's gain "
        "and cost, e.g. a sparse-reward remedy's)",
    )
    p.add_argument("--max-steps", type=int, default=None, help="stop each run after N steps")
    p.add_argument("--ci", action="store_true", help="two steps each, tiny model, one seed")
    p.add_argument(
        "--screen",
        action="store_true",
        help="only measure the base model on each dataset's held-out set (choosing datasets)",
    )
    p.add_argument("--side", help=argparse.SUPPRESS)  # internal: run one TRL training
    args = p.parse_args(argv)
    if args.ci:
        args.dataset = args.dataset or ["basic_arithmetic"]
        if args.dataset_config == "{}":
            args.dataset_config = json.dumps(CI_ARITHMETIC)
        args.model, args.seeds, args.lrs, args.max_steps = "tiny", "0", "1e-3", 2
        args.heldout, args.train_size, args.group_size, args.tasks_per_step = 8, 32, 4, 2
        args.completion_length, args.budget_min, args.marks = 8, 5.0, "0,5"
        # The tiny model never writes an <answer> tag: raw replies earn partial credit.
        args.answer_format, args.examples = "raw", 1
    if not args.dataset:
        p.error("give --dataset NAME (a Reasoning Gym dataset), or --ci")
    if args.trl_set and args.side is None:  # checked before any run, not an hour into one
        import dataclasses

        from trl import GRPOConfig

        known = {f.name for f in dataclasses.fields(GRPOConfig)}
        for key, _ in map(trl_override, args.trl_set):
            if key not in known:
                p.error(f"--trl-set {key}: GRPOConfig has no such field")
    return args


def environment(args: argparse.Namespace, dataset: str) -> dict[str, Any]:
    """The Reasoning Gym section both trainers draw their tasks and held-out set from."""
    return {
        "library": "reasoning_gym",
        "dataset": dataset,
        "config": json.loads(args.dataset_config),
        "train_size": args.train_size,
        "val_size": args.heldout,
        "answer_format": args.answer_format,
        "examples": args.examples,
    }


def messages(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The built-in agent's prompt of a task: system prompt, worked examples, the question."""
    from fulmen.environments.reasoning_gym import prompt_messages

    return prompt_messages(task)


def trl_override(override: str) -> tuple[str, Any]:
    """``KEY=VALUE`` (the value YAML) as a GRPOConfig keyword."""
    import yaml

    key, sep, value = override.partition("=")
    if not sep or not key.strip():
        raise SystemExit(f"--trl-set {override!r}: give KEY=VALUE")
    return key.strip(), yaml.safe_load(value)
