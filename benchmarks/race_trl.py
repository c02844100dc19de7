"""fulmen (``fulmen train``) against TRL's ``GRPOTrainer`` on Reasoning Gym, on one wall clock.

Both trainers get the same base model, LoRA rank and target modules, group size, tasks per
step, completion length, sampling temperature, training tasks, wall-clock budget and learning
rate grid; each runs in its own process, one after the other. Each saves its adapter as
training goes; the held-out accuracy (greedy, the same evaluator and the dataset's own
``score_answer`` for both) is measured afterwards, outside the budget, at fixed minutes: the
state after the last step that ended by that minute. Every point goes to
``OUT/results.jsonl``; the summary (best learning rate per trainer, means over seeds, the time
each needs to reach TRL's final accuracy and its ratio, the final paired gain with its standard
error, rollout tokens per second, update seconds per step) is printed as one JSON line and the
curves are drawn to ``OUT/race.png``.

    python benchmarks/race_trl.py --dataset calendar_arithmetic --out runs/race   # the full race
    python benchmarks/race_trl.py --dataset aiw --screen --out runs/screen         # base only
    python benchmarks/race_trl.py --ci --out /tmp/race                             # two steps each

The race runs in parts: a run whose rows are already in ``OUT/results.jsonl`` is not run again
(a run cut off midway is started afresh), so ``--seeds 0`` today and ``--seeds 1`` tomorrow
into one ``OUT`` add up, and a last call with every seed only summarizes. ``OUT/race.json``
holds the settings the rows were measured with; an ``OUT`` with other settings is refused.
Each run's row names the machine it ran on: compare wall clocks of one machine only.

TRL's side is written as TRL's own GRPO quick start, on the CPU (``use_cpu=True``), with the
shared knobs set to the race's values and everything else at TRL's defaults (``trl_args``).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
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


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
        for key, _ in map(_trl_override, args.trl_set):
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


# ---- fulmen's side: `fulmen train` on a config written for the run --------------------------


def run_fulmen(args: argparse.Namespace, dataset: str, lr: float, seed: int, run: Path) -> None:
    """Train with ``fulmen train`` for the budget; adapters land in ``run/adapters``."""
    import yaml

    steps = args.max_steps or 1_000_000
    config = {
        "model": args.model,
        "run_dir": str(run),
        "seed": seed,
        "environment": {**environment(args, dataset), "val_size": 0},
        "engine": {"max_batch": args.tasks_per_step * args.group_size},
        "rollouts": {
            "concurrency": args.tasks_per_step * args.group_size,
            "train_sampling": {"temperature": 1.0, "max_tokens": args.completion_length},
        },
        "algorithm": {
            "steps": steps,
            "tasks_per_step": args.tasks_per_step,
            "group_size": args.group_size,
            "max_minutes": None if args.max_steps else args.budget_min,
            "grpo": {
                "learning_rate": lr,
                "lora": {
                    "r": args.lora_r,
                    "alpha": 2 * args.lora_r,
                    "target_modules": args.lora_targets.split(","),
                },
            },
        },
    }
    run.mkdir(parents=True, exist_ok=True)
    (run / "race.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = [sys.executable, "-m", "fulmen", "train", str(run / "race.yaml")]
    argv += [arg for override in args.fulmen_set for arg in ("--set", override)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def fulmen_checkpoints(run: Path) -> tuple[list[tuple[float, Path]], dict[str, float]]:
    """(seconds since the first step began, adapter) per step, and the run's throughput."""
    from fulmen.trainer.metrics import read_metrics

    steps = [r for r in read_metrics(run / "metrics.jsonl") if "time/step_s" in r]
    start = steps[0]["time"] - steps[0]["time/step_s"]
    points = [(r["time"] - start, run / "adapters" / f"step-{int(r['step']):05d}") for r in steps]
    rollout_s = sum(r["time/rollout_s"] for r in steps)
    return points, {
        "steps": len(steps),
        "rollout_tokens_per_s": completion_tokens(run) / rollout_s,
        "update_s_per_step": statistics.fmean(r["time/train_s"] for r in steps),
    }


def completion_tokens(run: Path) -> int:
    """Every completion token the run's training rollouts generated, from its store.

    Counted from the recorded calls, not from what was trained: a step whose groups all
    scored alike trains nothing but generated as much.
    """
    import asyncio

    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts, read_llm_calls
    from fulmen.trainer.config import RUN_STORE_FILE
    from fulmen.types import Mode, RolloutQuery

    async def count() -> int:
        total = 0
        async with open_store(f"sqlite:///{run / RUN_STORE_FILE}", watchdog_interval=None) as store:
            async for rollout in iter_rollouts(store, RolloutQuery(mode=Mode.TRAIN, limit=1000)):
                for call in await read_llm_calls(store, rollout.rollout_id):
                    total += sum(len(choice.token_ids or []) for choice in call.choices)
        return total

    return asyncio.run(count())


# ---- TRL's side: GRPOTrainer as its quick start writes it, on the CPU -----------------------


def trl_args(args: argparse.Namespace, lr: float, seed: int, run: Path) -> dict[str, Any]:
    """TRL's ``GRPOConfig``: the race's shared knobs; TRL's defaults for everything else."""
    return {
        "output_dir": str(run),
        "use_cpu": True,
        "bf16": False,  # float32, as fulmen's updater computes by default
        "learning_rate": lr,
        "per_device_train_batch_size": args.tasks_per_step * args.group_size,
        "num_generations": args.group_size,
        "max_completion_length": args.completion_length,
        "temperature": 1.0,
        "max_steps": args.max_steps or 1_000_000,
        "seed": seed,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        **dict(_trl_override(o) for o in args.trl_set),
    }


def _trl_override(override: str) -> tuple[str, Any]:
    """``KEY=VALUE`` (the value YAML) as a GRPOConfig keyword."""
    import yaml

    key, sep, value = override.partition("=")
    if not sep or not key.strip():
        raise SystemExit(f"--trl-set {override!r}: give KEY=VALUE")
    return key.strip(), yaml.safe_load(value)


def run_trl(args: argparse.Namespace, dataset: str, lr: float, seed: int, run: Path) -> None:
    """Train TRL's ``GRPOTrainer`` in its own process (``--side trl``)."""
    spec = {"dataset": dataset, "lr": lr, "seed": seed, "run": str(run)}
    argv = [sys.executable, __file__, *sys.argv[1:], "--side", json.dumps(spec)]
    subprocess.run(argv, check=True)


def trl_side(args: argparse.Namespace, spec: dict[str, Any]) -> None:
    """One TRL run: the budget enforced and the adapter kept after every step by a callback."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from fulmen.engines.models import resolve_model
    from fulmen.environments.config import EnvironmentAdapter
    from fulmen.environments.reasoning_gym import reasoning_gym_tasks, score_reply

    run = Path(spec["run"])
    config = EnvironmentAdapter.validate_python(
        {**environment(args, spec["dataset"]), "val_size": 0}
    )
    tasks = reasoning_gym_tasks(config, "train")  # type: ignore[arg-type]
    rows = [{"prompt": messages(t), "task": json.dumps(t)} for t in tasks]

    def reasoning_gym_reward(completions: list[Any], task: list[str], **_: Any) -> list[float]:
        return [
            score_reply(json.loads(t), c[0]["content"] if isinstance(c, list) else c)
            for c, t in zip(completions, task, strict=True)
        ]

    class Clock(TrainerCallback):
        """Stops at the budget; saves each step's adapter with its time since training began."""

        def __init__(self) -> None:
            self.start = 0.0
            self.points: list[dict[str, Any]] = []

        def on_train_begin(self, *_: Any, **__: Any) -> None:
            self.start = time.monotonic()

        def on_step_end(
            self, _a: Any, state: Any, control: Any, model: Any = None, **__: Any
        ) -> None:
            elapsed = time.monotonic() - self.start
            path = run / "adapters" / f"step-{state.global_step:05d}"
            model.save_pretrained(path)
            self.points.append({"step": state.global_step, "seconds": elapsed, "path": str(path)})
            if elapsed >= args.budget_min * 60 and not args.max_steps:
                control.should_training_stop = True

    clock = Clock()
    lora = LoraConfig(
        r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules=args.lora_targets.split(",")
    )
    trainer = GRPOTrainer(
        model=str(resolve_model(args.model)),
        reward_funcs=reasoning_gym_reward,
        args=GRPOConfig(**trl_args(args, spec["lr"], spec["seed"], run)),
        train_dataset=Dataset.from_list(rows),
        peft_config=lora,
        callbacks=[clock],
    )
    generation_s = _time_generation(trainer)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    tokens = sum(h["completions/mean_length"] for h in logs) * args.tasks_per_step * args.group_size
    train_s = clock.points[-1]["seconds"]
    summary = {
        "points": clock.points,
        "steps": len(clock.points),
        "rollout_tokens_per_s": tokens / max(generation_s[0], 1e-9),
        "update_s_per_step": (train_s - generation_s[0]) / len(clock.points),
    }
    (run / "trl.json").write_text(json.dumps(summary), encoding="utf-8")


def _time_generation(trainer: Any) -> list[float]:
    """Add up the time TRL spends generating (its ``_generate``), to split rollout and update."""
    total = [0.0]
    generate = trainer._generate  # TRL 1.16's generation step (TRL is pinned below 1.17)

    def timed(*a: Any, **k: Any) -> Any:
        began = time.monotonic()
        try:
            return generate(*a, **k)
        finally:
            total[0] += time.monotonic() - began

    trainer._generate = timed
    return total


# ---- the held-out evaluation, the same for both ---------------------------------------------


def evaluate(
    args: argparse.Namespace, heldout: list[dict[str, Any]], adapter: Path | None
) -> dict[str, Any]:
    """Greedy held-out accuracy (score 1) and mean score of the base model with ``adapter``.

    ``correct`` holds each problem's verdict (1: scored 1) in held-out order, so two trainers
    scored on the same problems are compared problem by problem.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fulmen.engines.models import resolve_model
    from fulmen.environments.reasoning_gym import score_reply

    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    scores: list[float] = []
    for start in range(0, len(heldout), 16):
        batch = heldout[start : start + 16]
        prompts = [
            tokenizer.apply_chat_template(messages(t), tokenize=False, add_generation_prompt=True)
            for t in batch
        ]
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **encoded,
                max_new_tokens=args.completion_length,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            )
        for task, ids in zip(batch, out[:, encoded["input_ids"].shape[1] :], strict=True):
            scores.append(score_reply(task, tokenizer.decode(ids, skip_special_tokens=True)))
    correct = [int(s >= 1.0) for s in scores]
    return {
        "accuracy": sum(correct) / len(correct),
        "score": statistics.fmean(scores),
        "correct": correct,
    }


def at_mark(points: list[tuple[float, Path]], minute: float) -> Path | None:
    """The adapter after the last step that ended by ``minute`` (``None``: the base model)."""
    done = [path for seconds, path in points if seconds <= minute * 60]
    return done[-1] if done else None


# ---- the whole race and its summary ---------------------------------------------------------


def race(args: argparse.Namespace) -> dict[str, Any]:
    """Run every run not yet recorded in ``OUT`` (or, with ``--screen``, the base model only)."""
    from fulmen.environments.config import EnvironmentAdapter
    from fulmen.environments.reasoning_gym import reasoning_gym_tasks

    results = open_out(args)
    marks = [float(m) for m in args.marks.split(",")]
    recorded = read_results(results)
    screened: dict[str, Any] = {}
    for dataset in args.dataset:
        config = EnvironmentAdapter.validate_python(environment(args, dataset))
        heldout = reasoning_gym_tasks(config, "val")  # type: ignore[arg-type]
        if not args.screen:
            recorded = score_again(args, dataset, heldout, results, recorded)
        base = next((r for r in recorded if r == {**r, "kind": "base", "dataset": dataset}), None)
        if base is None:
            base = {"kind": "base", "dataset": dataset, **evaluate(args, heldout, None)}
            _append(results, base)
        screened[dataset] = screen_row(base, heldout)
        if args.screen:
            continue
        measured = {k: base[k] for k in ("accuracy", "score", "correct") if k in base}
        for seed in (int(s) for s in args.seeds.split(",")):
            for lr in (float(x) for x in args.lrs.split(",")):
                for trainer in args.trainers.split(","):
                    row = {"dataset": dataset, "trainer": trainer, "lr": lr, "seed": seed}
                    if any(r == {**r, **row, "kind": "speed"} for r in recorded):
                        continue  # recorded by an earlier call into this OUT
                    run = args.out / dataset / trainer / f"lr{lr:g}" / f"seed{seed}"
                    shutil.rmtree(run, ignore_errors=True)  # a run cut off midway starts afresh
                    rows = race_one(args, heldout, measured, row, run, marks)
                    for record in rows:  # all of a run's rows at once: it counts as done
                        _append(results, record)
                    recorded += rows
    if args.screen:
        return {"screen": screened}
    summary = summarize(read_results(results), marks)
    plot(summary, args.out / "race.png")
    return summary


def race_one(
    args: argparse.Namespace,
    heldout: list[dict[str, Any]],
    base: dict[str, float],
    row: dict[str, Any],
    run: Path,
    marks: list[float],
) -> list[dict[str, Any]]:
    """Train one trainer at one rate and seed, then measure it at every mark: its rows."""
    dataset, trainer, lr, seed = row["dataset"], row["trainer"], row["lr"], row["seed"]
    (run_fulmen if trainer == "fulmen" else run_trl)(args, dataset, lr, seed, run)
    if trainer == "fulmen":
        points, speed = fulmen_checkpoints(run)
    else:
        summary = json.loads((run / "trl.json").read_text())
        points = [(p["seconds"], Path(p["path"])) for p in summary.pop("points")]
        speed = summary
    rows = [{**row, "kind": "speed", "machine": machine(), **speed}]
    for minute in marks:
        adapter = at_mark(points, minute)
        measured = base if adapter is None else evaluate(args, heldout, adapter)
        step = 0 if adapter is None else int(adapter.name.split("-")[1])
        rows.append({**row, "kind": "point", "minute": minute, "step": step, **measured})
    return rows


def score_again(
    args: argparse.Namespace,
    dataset: str,
    heldout: list[dict[str, Any]],
    results: Path,
    recorded: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Give each of ``dataset``'s rows recorded without per-problem verdicts its ``correct``.

    Rows measured before the race kept them are scored again from the adapter the run saved
    (``step-N`` of its folder; step 0 is the base model): the evaluator is greedy and
    deterministic, so a verdict list is kept only where it gives the recorded accuracy again.
    ``results`` is rewritten whole (a temporary file moved over it); the rows are returned.
    """
    missing = [
        r
        for r in recorded
        if r.get("dataset") == dataset and r["kind"] in ("base", "point") and "correct" not in r
    ]
    if not missing:
        return recorded
    verdicts: dict[Path | None, dict[str, Any]] = {}
    for row in missing:
        adapter = None
        if row["kind"] == "point" and row["step"]:
            run = args.out / dataset / row["trainer"] / f"lr{row['lr']:g}" / f"seed{row['seed']}"
            adapter = run / "adapters" / f"step-{int(row['step']):05d}"
            if not adapter.exists():
                print(f"race: {adapter} is gone; its row keeps no verdicts", file=sys.stderr)
                continue
        if adapter not in verdicts:
            verdicts[adapter] = evaluate(args, heldout, adapter)
        again = verdicts[adapter]
        if again["accuracy"] == row["accuracy"]:
            row["correct"] = again["correct"]
        else:
            print(
                f"race: {adapter or 'the base model'} scores {again['accuracy']} now, "
                f"{row['accuracy']} when recorded; its row keeps no verdicts",
                file=sys.stderr,
            )
    scratch = results.with_suffix(".rewrite")
    scratch.write_text("".join(json.dumps(r) + "\n" for r in recorded), encoding="utf-8")
    os.replace(scratch, results)
    return recorded


def open_out(args: argparse.Namespace) -> Path:
    """Make ``OUT``, record the race's settings there; refuse one measured with others."""
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {key: getattr(args, key) for key in SETTINGS}
    path, results = args.out / "race.json", args.out / "results.jsonl"
    if path.exists():
        found = json.loads(path.read_text(encoding="utf-8"))
        found = {**ADDED_SETTINGS, **found}
        differ = sorted(k for k in set(found) | set(settings) if found.get(k) != settings.get(k))
        if differ:
            shown = ", ".join(
                f"{k}: {found.get(k)!r} there, {settings.get(k)!r} now" for k in differ
            )
            raise SystemExit(
                f"{args.out} holds a race with other settings ({shown}); use another --out"
            )
    elif results.exists():
        raise SystemExit(f"{results} has no race.json beside it: use another --out")
    else:
        path.write_text(json.dumps(settings, indent=1), encoding="utf-8")
    return results


def read_results(results: Path) -> list[dict[str, Any]]:
    """Every row recorded so far (none before the first run)."""
    if not results.exists():
        return []
    return [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]


def screen_row(base: dict[str, Any], heldout: list[dict[str, Any]]) -> dict[str, Any]:
    """The base model's accuracy (± SE), whether it suits the race, and the majority baseline.

    The majority baseline is the accuracy of answering every problem with the commonest answer.
    """
    from fulmen.environments.reasoning_gym import score_reply

    p, n = base["accuracy"], len(heldout)
    low, high = SCREEN_RANGE
    answers = collections.Counter(str(t["answer"]) for t in heldout)
    common = answers.most_common(1)[0][0]
    wrap = "{}" if heldout[0]["agent"]["answer_format"] == "raw" else "<answer>{}</answer>"
    majority = sum(score_reply(t, wrap.format(common)) >= 1.0 for t in heldout) / n
    return {
        "accuracy": p,
        "se": math.sqrt(p * (1 - p) / n),
        "score": base["score"],
        "problems": n,
        "majority": majority,
        "in_range": low <= p <= high,
    }


def machine() -> str:
    """The machine a run ran on: its name, CPU model and core count."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}: {cpu} x{os.cpu_count()}"


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, se


def _time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """The first minute ``curve`` (minute, accuracy) reaches ``target``, linearly between marks."""
    if not curve:
        return None
    if curve[0][1] >= target:
        return curve[0][0]
    for (m0, a0), (m1, a1) in itertools.pairwise(curve):
        if a1 >= target:  # a0 < target <= a1
            return m0 + (m1 - m0) * (target - a0) / (a1 - a0)
    return None


def summarize(records: list[dict[str, Any]], marks: list[float]) -> dict[str, Any]:
    """Per dataset: each trainer at its best rate, its curve over seeds, and the comparisons."""
    out: dict[str, Any] = {}
    points = [r for r in records if r["kind"] == "point"]
    for dataset in sorted({r["dataset"] for r in points}):
        best: dict[str, Any] = {}
        finals: dict[str, dict[int, list[int]]] = {}
        for trainer in sorted({r["trainer"] for r in points if r["dataset"] == dataset}):
            mine = [r for r in points if (r["dataset"], r["trainer"]) == (dataset, trainer)]
            final = max(marks)
            by_lr = _rate_grid(mine, final)
            lr = max(by_lr, key=lambda x: by_lr[x])
            chosen = [r for r in mine if r["lr"] == lr]
            seeds = sorted({r["seed"] for r in chosen})
            curve = {
                m: _mean_se([r["accuracy"] for r in chosen if r["minute"] == m]) for m in marks
            }
            per_seed = {
                s: [
                    (m, next(r["accuracy"] for r in chosen if r["seed"] == s and r["minute"] == m))
                    for m in marks
                ]
                for s in seeds
            }
            speed = [
                r
                for r in records
                if r["kind"] == "speed"
                and (r["dataset"], r["trainer"], r["lr"]) == (dataset, trainer, lr)
            ]
            finals[trainer] = {
                r["seed"]: r["correct"]
                for r in chosen
                if r["minute"] == final and r.get("correct") is not None
            }
            best[trainer] = {
                "lr": lr,
                "lr_grid": by_lr,
                "accuracy": {str(m): {"mean": v[0], "se": v[1]} for m, v in curve.items()},
                # Where this is not above 0, reaching TRL's final takes no time: no ratio.
                "final_over_start": curve[final][0] - curve[min(marks)][0],
                "per_seed": per_seed,
                "rollout_tokens_per_s": statistics.fmean(r["rollout_tokens_per_s"] for r in speed),
                "update_s_per_step": statistics.fmean(r["update_s_per_step"] for r in speed),
                "steps": statistics.fmean(r["steps"] for r in speed),
                "machines": sorted({r.get("machine", "?") for r in speed}),
            }
        out[dataset] = {"trainers": best, **_compare(best, marks, finals)}
    return out


def _rate_grid(mine: list[dict[str, Any]], final: float) -> dict[float, float]:
    """Each rate's mean final accuracy over the seeds every rate ran (the grid's seeds).

    The grid may run on fewer seeds than the chosen rate (say seed 0 at both rates, seeds 1
    and 2 at the better one only): comparing rates over different seeds would compare seeds.
    """
    finals = {(r["lr"], r["seed"]): r["accuracy"] for r in mine if r["minute"] == final}
    rates = sorted({lr for lr, _ in finals})
    common = set.intersection(*({s for l2, s in finals if l2 == lr} for lr in rates))
    if not common:
        raise SystemExit(f"the rates {rates} share no seed: run each on one seed at least")
    return {lr: statistics.fmean(finals[lr, s] for s in sorted(common)) for lr in rates}


def _compare(
    best: dict[str, Any], marks: list[float], finals: dict[str, dict[int, list[int]]]
) -> dict[str, Any]:
    """TRL's final accuracy, the minutes each trainer needs to reach it, and the final gain.

    The gain (fulmen minus TRL at the last mark, paired by seed) has two standard errors: over
    seeds (what another seed would change) and over problems (the per-problem difference,
    averaged over the seeds, on the one held-out set both are scored on: what another draw of
    problems would change). A gain counts as shown only with at least two seeds and at least
    twice the larger of the two.
    """
    if not {"fulmen", "trl"} <= set(best):
        return {}
    final = str(max(marks))
    target = best["trl"]["accuracy"][final]["mean"]
    # On the mean curves: a seed whose TRL run ends below TRL's mean final never reaches it,
    # so times per seed would leave TRL's own time undefined.
    mean_time = {
        t: _time_to([(m, best[t]["accuracy"][str(m)]["mean"]) for m in marks], target)
        for t in ("fulmen", "trl")
    }
    ratio = None
    if mean_time["fulmen"] is not None and mean_time["trl"]:
        ratio = mean_time["fulmen"] / mean_time["trl"]
    seeds = sorted(set(best["fulmen"]["per_seed"]) & set(best["trl"]["per_seed"]))
    gains = [
        best["fulmen"]["per_seed"][s][-1][1] - best["trl"]["per_seed"][s][-1][1] for s in seeds
    ]
    gain, se = _mean_se(gains) if gains else (float("nan"), float("nan"))
    paired = [s for s in seeds if s in finals.get("fulmen", {}) and s in finals.get("trl", {})]
    se_problems = None
    if paired:
        per_problem = [
            statistics.fmean(finals["fulmen"][s][i] - finals["trl"][s][i] for s in paired)
            for i in range(len(finals["fulmen"][paired[0]]))
        ]
        se_problems = _mean_se(per_problem)[1]
    shown = (
        len(gains) >= 2
        and se_problems is not None
        and max(se, se_problems) > 0
        and gain >= 2 * max(se, se_problems)
    )
    return {
        "trl_final_accuracy": target,
        "minutes_to_trl_final": mean_time,
        "time_ratio_fulmen_over_trl": ratio,
        "final_gain": gain,
        "final_gain_se": se,
        "final_gain_se_problems": se_problems,
        "seeds": len(gains),
        "gain_shown": shown,
    }


def plot(summary: dict[str, Any], path: Path) -> None:
    """Both trainers' held-out accuracy over minutes (mean ± SE over seeds), one panel a dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(5 * len(summary), 3.6), squeeze=False)
    for ax, (dataset, found) in zip(axes[0], summary.items(), strict=True):
        for trainer, data in found["trainers"].items():
            minutes = [float(m) for m in data["accuracy"]]
            mean = [v["mean"] for v in data["accuracy"].values()]
            se = [v["se"] for v in data["accuracy"].values()]
            ax.plot(minutes, mean, marker="o", label=f"{trainer} (lr {data['lr']:g})")
            ax.fill_between(
                minutes,
                [m - s for m, s in zip(mean, se, strict=True)],
                [m + s for m, s in zip(mean, se, strict=True)],
                alpha=0.2,
            )
        ax.set_title(dataset)
        ax.set_xlabel("training wall clock (min)")
        ax.set_ylabel("held-out accuracy (greedy)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    args = _args()
    if args.side:
        trl_side(args, json.loads(args.side))
        return 0
    summary = race(args)
    print(json.dumps({"race": summary, "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
