"""TRL's side of the race: ``GRPOTrainer`` as TRL's GRPO quick start writes it, on the CPU."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from race.child import run_child
from race.settings import environment, messages, trl_override

ENTRY = Path(__file__).resolve().parents[1] / "race_trl.py"


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
        **dict(trl_override(o) for o in args.trl_set),
    }


def run_trl(args: argparse.Namespace, dataset: str, lr: float, seed: int, run: Path) -> None:
    """Train TRL's ``GRPOTrainer`` in its own process (``--side trl``)."""
    spec = {"dataset": dataset, "lr": lr, "seed": seed, "run": str(run)}
    argv = [sys.executable, str(ENTRY), *sys.argv[1:], "--side", json.dumps(spec)]
    run_child(argv)


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
