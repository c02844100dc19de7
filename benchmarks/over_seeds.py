"""A learning benchmark run once per seed: every seed's before/after and the mean gain over seeds.

One run of a learning benchmark is one random draw (task order, LoRA initialisation, the
sampled rollouts): it does not measure a setting. This runs ``learn_examples.py`` or
``learn_calc.py`` (everything after ``--``) once per ``--seeds`` value, one after the other in
its own process (``--set seed=S``, run directory ``OUT/seedS``), keeps each run's JSON line in
``OUT/results.jsonl`` (a seed already there is not run again, so an interrupted sweep goes on
where it stopped) and prints one JSON line: each seed's held-out reward before and after, its
paired gain ± standard error and what the run ended serving (``validation.keep_best``), then
the mean gain over seeds with its standard error (the standard deviation of the per-seed gains
over ``sqrt(seeds)``), ``gain_shown`` (the mean is at least twice that), and how many seeds
ended below their baseline, after training and as served. Each row names the machine it ran
on: the runs have a wall-clock budget, so ``--versus`` pairs a seed only where both sweeps ran
it on one machine. Stopping the sweep (Ctrl-C, SIGTERM) stops the seed's run with it.

    python benchmarks/over_seeds.py --out /tmp/math-seeds --seeds 0 1 2 -- \\
        benchmarks/learn_examples.py --example math --minutes 30
    python benchmarks/over_seeds.py --out /tmp/calc-seeds -- benchmarks/learn_calc.py --minutes 40
    python benchmarks/over_seeds.py --out /tmp/math-redraw --versus /tmp/math-seeds -- \\
        benchmarks/learn_examples.py --example math --minutes 30 \\
        --set 'algorithm.dynamic_sampling={redraw: true}'     # a setting against the sweep
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the race/ package beside this file

from race.child import run_child, stop_on_sigterm
from race.records import machine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, required=True, help="run directories and results")
    parser.add_argument(
        "--versus",
        type=Path,
        metavar="BASE",
        help="another sweep's OUT (the same benchmark without the setting being measured): "
        "each seed's held-out figure after training here minus there, and the sampling cost",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- BENCHMARK.py [ARGS...]")
    args = parser.parse_args()
    stop_on_sigterm()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or not command[0].endswith(".py"):
        parser.error("give the benchmark after --, e.g. -- benchmarks/learn_calc.py --minutes 40")
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.jsonl"
    results = _read_results(results_path)
    for seed in args.seeds:
        if seed in results:
            print(f"seed {seed}: already in {results_path}", file=sys.stderr)
            continue
        run_dir = args.out / f"seed{seed}"
        argv = [sys.executable, *command, "--set", f"seed={seed}", "--run-dir", str(run_dir)]
        print(f"seed {seed}: {' '.join(argv)}", file=sys.stderr, flush=True)
        try:
            line = _last_json_line(run_child(argv, stdout=subprocess.PIPE, text=True))
        except subprocess.CalledProcessError as failed:
            print(f"seed {seed}: exit {failed.returncode}, no result", file=sys.stderr)
            return 1
        if line is None:
            print(f"seed {seed}: no JSON line on its output, no result", file=sys.stderr)
            return 1
        line["seed"] = seed
        line["machine"] = machine()
        with results_path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        results[seed] = line
        print(json.dumps(_row(line)), file=sys.stderr, flush=True)
    line = summarize([results[s] for s in args.seeds])
    if args.versus:
        base = _read_results(args.versus / "results.jsonl")
        line["versus"] = versus(results, base, args.out, args.versus)
    print(json.dumps(line))
    return 0


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every seed's figures and the mean gain over seeds with its standard error."""
    rows = [_row(run) for run in runs]
    gains = [row["gain"] for row in rows if row["gain"] is not None]
    mean = statistics.fmean(gains) if gains else None
    se = statistics.stdev(gains) / math.sqrt(len(gains)) if len(gains) > 1 else None
    return {
        "seeds": len(rows),
        "per_seed": rows,
        "gain_mean": _round(mean),
        "gain_se_over_seeds": _round(se),
        "gain_shown": mean is not None and se is not None and mean >= 2 * se > 0,
        "seeds_below_baseline_after": sum(
            1 for r in rows if r["after"] is not None and r["after"] < r["before"]
        ),
        "seeds_below_baseline_served": sum(
            1 for r in rows if r["served"] is not None and r["served"] < r["before"]
        ),
    }


def versus(
    runs: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]], out: Path, base_out: Path
) -> dict[str, Any]:
    """This sweep's held-out figure after training minus ``base``'s, seed by seed.

    A seed's runs share their held-out tasks and base model (``before`` is given for both, to
    see it), so the difference of the ``after`` figures is paired by seed; its standard error
    is over seeds. ``cost`` is each side's mean ``sampling/cost`` over its steps (1.0: no
    dynamic sampling), read from the run directories' ``metrics.jsonl``. A seed whose two rows
    name different machines (a row from before rows named one names none) is left out, under
    ``other_machine``: a run's budget is wall-clock, and the machines here differ 1.5-2x.
    """
    common = sorted(set(runs) & set(base))
    apart = {
        str(s): {"setting": runs[s].get("machine"), "base": base[s].get("machine")}
        for s in common
        if runs[s].get("machine") != base[s].get("machine")
    }
    seeds = [s for s in common if str(s) not in apart]
    rows = []
    for seed in seeds:
        mine, theirs = _row(runs[seed]), _row(base[seed])
        rows.append(
            {
                "seed": seed,
                "before": [mine["before"], theirs["before"]],
                "after": [mine["after"], theirs["after"]],
                "difference": mine["after"] - theirs["after"],
                "cost": [_cost(out / f"seed{seed}"), _cost(base_out / f"seed{seed}")],
            }
        )
    differences = [r["difference"] for r in rows]
    mean = statistics.fmean(differences) if differences else None
    se = statistics.stdev(differences) / math.sqrt(len(rows)) if len(rows) > 1 else None
    return {
        "base": str(base_out),
        "seeds": len(rows),
        "per_seed": rows,
        "difference_mean": _round(mean),
        "difference_se_over_seeds": _round(se),
        "difference_shown": mean is not None and se is not None and mean >= 2 * se > 0,
        "machines": sorted({runs[s].get("machine") or "unrecorded" for s in seeds}),
        "other_machine": apart,
    }


def _cost(run_dir: Path) -> float | None:
    """The mean ``sampling/cost`` of a run's steps (1.0 for a step without dynamic sampling)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    steps = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    costs = [r.get("sampling/cost", 1.0) for r in steps if "time/step_s" in r]
    return _round(statistics.fmean(costs)) if costs else None


def _row(run: dict[str, Any]) -> dict[str, Any]:
    """One seed's figures, under the same names whichever benchmark produced them."""
    paired = "paired_gain" in run  # learn_calc: the paired figures are the paired_* keys
    return {
        "seed": run.get("seed"),
        "machine": run.get("machine"),
        "before": run.get("reward_before", run.get("accuracy_before")),
        "after": run.get("reward_after", run.get("accuracy_after")),
        "gain": run.get("paired_gain") if paired else run.get("gain"),
        "gain_se": run.get("paired_gain_se") if paired else run.get("gain_se"),
        "served": run.get("reward_served"),
        "served_step": run.get("served_step"),
        "grpo_steps": run.get("grpo_steps"),
        "updated_steps": run.get("updated_steps"),
        "entropy_first5": run.get("entropy_first5"),
        "entropy_last5": run.get("entropy_last5"),
    }


def _read_results(path: Path) -> dict[int, dict[str, Any]]:
    if not path.exists():
        return {}
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {int(run["seed"]): run for run in runs}


def _last_json_line(stdout: str | None) -> dict[str, Any] | None:
    for line in reversed((stdout or "").splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


if __name__ == "__main__":
    sys.exit(main())
