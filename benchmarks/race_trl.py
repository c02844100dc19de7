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
    python benchmarks/race_trl.py --dataset calendar_arithmetic --trainers fulmen --lrs 5e-5 \
        --fulmen-set 'algorithm.dynamic_sampling={redraw: true}' --out runs/race-redraw \
        --versus runs/race                      # a fulmen setting against the race's fulmen runs

The race runs in parts: a run whose rows are already in ``OUT/results.jsonl`` is not run again
(a run cut off midway is started afresh), so ``--seeds 0`` today and ``--seeds 1`` tomorrow
into one ``OUT`` add up, and a last call with every seed only summarizes. ``OUT/race.json``
holds the settings the rows were measured with; an ``OUT`` with other settings is refused.
Each run's row names the machine it ran on: compare wall clocks of one machine only.

TRL's side is written as TRL's own GRPO quick start, on the CPU (``use_cpu=True``), with the
shared knobs set to the race's values and everything else at TRL's defaults (``trl_args`` in
``race/trl_side.py``). The parts live in ``race/`` beside this script, one module a job.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the race/ package beside this file

from race.child import stop_on_sigterm
from race.fulmen_side import fulmen_checkpoints, run_fulmen
from race.heldout import at_mark, evaluate, screen_row
from race.plot import plot
from race.records import append, machine, open_out, read_results, score_again
from race.settings import environment, parse_args
from race.summary import summarize
from race.trl_side import run_trl, trl_side
from race.versus import check_base, versus


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
            append(results, base)
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
                        append(results, record)
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
        points, speed = fulmen_checkpoints(run, args.group_size)
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


def main() -> int:
    stop_on_sigterm()  # a stopped race stops the trainer it waits on (race/child.py)
    args = parse_args()
    if args.side:
        trl_side(args, json.loads(args.side))
        return 0
    if args.versus:
        check_base(args)
    line: dict[str, Any] = {"race": race(args), "out": str(args.out)}
    if args.versus and not args.screen:
        line["versus"] = versus(args.out, args.versus)
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
