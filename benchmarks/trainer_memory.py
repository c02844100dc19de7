"""The trainer's resident memory step by step, with freed memory handed back and without.

Runs ``fulmen train`` on one example config twice, one after the other, each in a process of its
own: as shipped (``trim_freed_memory`` trims glibc's arenas once per step) and the baseline
with the trim replaced by a plain reading of resident memory. Prints each step's resident GiB
(``memory/rss_gb`` from ``metrics.jsonl``) for both, each process's peak (``ru_maxrss``), the
mean update time and the trim's own mean time (``memory/trim_s``), then one JSON line.
Needs ``.venvs/learn`` for the framework examples (``agl_sql``).

    python benchmarks/trainer_memory.py --steps 10
    python benchmarks/trainer_memory.py --config examples/calc/config.yaml --steps 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The baseline child: the same `fulmen train`, its per-step trim replaced by a reading only.
_BASELINE = """
import sys
import fulmen.trainer.stage_progress as stage_progress
from fulmen.trainer.memory import resident_bytes
stage_progress.trim_freed_memory = lambda: {"memory/rss_gb": (resident_bytes() or 0) / 2**30}
from fulmen.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
_SHIPPED = "import sys\nfrom fulmen.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"


def _run(code: str, config: Path, run_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """Train once in a child process; return its per-step memory and its peak resident GiB."""
    args = [sys.executable, "-c", code, "train", str(config), "--no-dashboard"]
    args += ["--set", f"run_dir={run_dir}", *(a for o in overrides for a in ("--set", o))]
    child = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"training failed ({os.waitstatus_to_exitcode(status)}): {args}")
    steps: dict[int, float] = {}
    train_s: list[float] = []
    trim_s: list[float] = []
    with (run_dir / "metrics.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if "memory/rss_gb" in record:
                steps[int(record["step"])] = round(float(record["memory/rss_gb"]), 2)
                train_s.append(float(record.get("time/train_s", 0.0)))
                trim_s.append(float(record.get("memory/trim_s", 0.0)))
    return {
        "rss_gb_by_step": steps,
        "peak_gb": round(usage.ru_maxrss / 2**20, 2),
        "train_s_mean": round(sum(train_s) / max(1, len(train_s)), 2),
        "trim_s_mean": round(sum(trim_s) / max(1, len(trim_s)), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "examples/agl_sql/gemma.yaml")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    args = parser.parse_args()
    overrides = [f"algorithm.steps={args.steps}", "validation=null", *args.set]
    result: dict[str, Any] = {"config": str(args.config), "steps": args.steps}
    with tempfile.TemporaryDirectory(prefix="fulmen-memory-") as scratch:
        for name, code in (("baseline", _BASELINE), ("shipped", _SHIPPED)):
            run = _run(code, args.config.resolve(), Path(scratch) / name, overrides)
            result[name] = run
            series = " ".join(f"{v:.1f}" for _, v in sorted(run["rss_gb_by_step"].items()))
            print(f"{name}: resident GiB after each step: {series}; peak {run['peak_gb']} GiB")
    names = ("baseline", "shipped")
    last = {name: max(result[name]["rss_gb_by_step"].items())[1] for name in names}
    result["last_step_ratio"] = round(last["shipped"] / last["baseline"], 3)
    result["peak_ratio"] = round(result["shipped"]["peak_gb"] / result["baseline"]["peak_gb"], 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
