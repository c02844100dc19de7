"""Seconds per GRPO step of the calc example (Gemma 3 270M) under several speed settings.

Each setting trains ``examples/calc/config.yaml`` for ``--steps`` steps in a fresh run
directory, one setting after the other, each in its own child process (a Gemma trainer does not
hand all its memory back; two in one process were OOM-killed on a 23 GB machine); same seed, so
the same problems in the same order; no validation. Settings:

- ``no_cache``: the engine without its prefix cache, float32 everywhere (the defaults before
  the prefix cache; the baseline of the ratios),
- ``default``: today's defaults (prefix cache on, float32 engine and update),
- ``default_async``: ``default`` with ``algorithm.async: {max_staleness: 1, is_cap: 2.0}``
  (the next step's rollouts run while the update does; ``docs/async.md``),
- ``fast``: prefix cache, ``engine.dtype: bfloat16`` and ``algorithm.grpo.autocast:
  bfloat16`` (bfloat16 matmuls, float32 master weights),
- ``fast_threads2``: ``fast`` with ``engine.threads: 2`` (the engine computes with two torch
  threads, as many as this machine has cores; the update waits while rollouts run),
- ``fast_async``: ``fast`` with the same ``algorithm.async``.

The first step of each setting warms up (adapter creation, first prefill of the shared prompt)
and is reported but left out of the means. Per setting: mean seconds per step and of its
phases (rollouts, update, weight sync), trained tokens/s of the update, the importance-ratio
health of the update (``logprob_gap``: mean |engine logprob - trainer logprob| of the trained
tokens; ``ratio_mean``), and the step-time ratio to ``no_cache``. In the async settings the
rollout phase is the time the step took to collect finished groups (``time/wait_data_s`` of it
waiting), since sampling overlaps the previous update. Prints ONE JSON line;
``uptime`` before and after says how loaded the machine was.

    python benchmarks/calc_step_time.py --steps 4
    python benchmarks/calc_step_time.py --settings default,fast --steps 6
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

CALC = Path(__file__).resolve().parents[1] / "examples" / "calc" / "config.yaml"
ASYNC = "algorithm.async={max_staleness: 1, is_cap: 2.0}"
SETTINGS: dict[str, list[str]] = {
    "no_cache": ["engine.prefix_cache=false"],
    "default": [],
    "default_async": [ASYNC],
    "fast": ["engine.dtype=bfloat16", "algorithm.grpo.autocast=bfloat16"],
    "fast_threads2": [
        "engine.dtype=bfloat16",
        "algorithm.grpo.autocast=bfloat16",
        "engine.threads=2",
    ],
    "fast_async": [
        "engine.dtype=bfloat16",
        "algorithm.grpo.autocast=bfloat16",
        ASYNC,
    ],
}
PHASES = ("step", "rollout", "train", "sync")


def run_setting(name: str, steps: int, run_dir: Path) -> dict[str, Any]:
    """Train calc for ``steps`` steps under setting ``name``; return its per-step figures."""
    config = load_config(
        CALC,
        overrides=[
            f"run_dir={run_dir}",
            f"algorithm.steps={steps}",
            "algorithm.checkpoint_every=1000",
            "data.val=null",
            "validation=null",
            *SETTINGS[name],
        ],
    )
    started = time.perf_counter()
    Trainer(config).fit()
    wall = time.perf_counter() - started
    records = [r for r in read_metrics(run_dir / "metrics.jsonl") if "time/step_s" in r]
    timed = records[1:] or records
    out: dict[str, Any] = {
        "setting": name,
        "overrides": SETTINGS[name],
        "steps": len(records),
        "wall_s": round(wall, 1),
        "first_step_s": round(records[0]["time/step_s"], 2) if records else None,
    }
    for phase in PHASES:
        out[f"{phase}_s"] = _mean(timed, f"time/{phase}_s", 2)
    for key in (
        "trained_tokens_per_s",
        "logprob_gap",
        "ratio_mean",
        "reward/mean",
        "time/wait_data_s",
        "async/staleness_mean",
    ):
        out[key] = _mean(timed, key, 4)
    return out


def _mean(records: list[dict[str, Any]], key: str, digits: int) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return round(statistics.fmean(values), digits) if values else None


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per setting (>= 2)")
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help=f"comma-separated, of {list(SETTINGS)}"
    )
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)  # a child: one setting
    args = parser.parse_args()
    names = [n.strip() for n in args.settings.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown or not names:
        parser.error(f"unknown settings {unknown}; choose from {list(SETTINGS)}")
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is a warm-up)")
    if args.run_dir is not None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
        for noisy in ("httpx", "httpx2", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        print(json.dumps(run_setting(names[0], args.steps, args.run_dir)))
        return 0

    result: dict[str, Any] = {"uptime_before": _uptime(), "steps_per_setting": args.steps}
    runs = []
    with tempfile.TemporaryDirectory(prefix="fulmen-calc-step-") as tmp:
        for name in names:
            child = subprocess.run(
                [sys.executable, __file__, "--steps", str(args.steps), "--settings", name,
                 "--run-dir", str(Path(tmp) / name)],
                stdout=subprocess.PIPE, text=True, check=True,
            )  # fmt: skip
            runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    result["runs"] = runs
    baseline = next((r for r in runs if r["setting"] == "no_cache"), runs[0])
    result["baseline"] = baseline["setting"]
    result["step_time_ratio_to_baseline"] = {
        r["setting"]: _ratio(r["step_s"], baseline["step_s"]) for r in runs
    }
    result["speedup_over_baseline"] = {
        r["setting"]: _ratio(baseline["step_s"], r["step_s"]) for r in runs
    }
    result["uptime_after"] = _uptime()
    print(json.dumps(result))
    return 0


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


if __name__ == "__main__":
    sys.exit(main())
