"""The engine-trainer logprob gap per engine, measured on real GRPO steps.

Runs ``fulmen train CONFIG`` once per engine setting (the built-in engine and vLLM, each in
float32 and in bfloat16; vLLM when ``FULMEN_VLLM_PYTHON`` names its environment), one after the
other with the same seed and steps, and prints per setting the steps' ``mismatch/*`` metrics
(``docs/engine-mismatch.md``): the mean and largest |trainer - engine| logprob, the k3 estimate
of KL(engine || trainer) and the share of tokens whose ratio is outside the bounds.

    python benchmarks/engine_mismatch.py examples/calc/config.yaml --out /tmp/gap --steps 1
    python benchmarks/engine_mismatch.py examples/toy/config.yaml --out /tmp/gap --steps 3 \
        --engines builtin-float32,builtin-bfloat16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {
    "builtin-float32": ["engine.kind=builtin", "engine.dtype=float32"],
    "builtin-bfloat16": ["engine.kind=builtin", "engine.dtype=bfloat16"],
    "vllm-float32": ["engine={kind: vllm}"],  # the built-in engine's own keys do not apply
    "vllm-bfloat16": ["engine={kind: vllm, dtype: bfloat16}"],
}
KEYS = (
    "mismatch/gap_mean",
    "mismatch/gap_max",
    "mismatch/kl",
    "mismatch/outside_fraction",
    "ratio_mean",
    "clip_fraction",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("config", type=Path, help="a fulmen train config (GRPO)")
    p.add_argument("--out", type=Path, required=True, help="folder for the runs")
    p.add_argument("--steps", type=int, default=1, help="GRPO steps per setting (default 1)")
    p.add_argument(
        "--engines",
        default=",".join(SETTINGS),
        help=f"comma-separated settings among {', '.join(SETTINGS)} (default: all)",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every run (repeatable)")  # fmt: skip
    args = p.parse_args(argv)
    names = [n for n in args.engines.split(",") if n]
    unknown = sorted(set(names) - set(SETTINGS))
    if unknown or args.steps < 1:
        p.error(f"unknown settings {unknown}" if unknown else "--steps must be at least 1")
    if any(n.startswith("vllm") for n in names) and not os.environ.get("FULMEN_VLLM_PYTHON"):
        p.error("vllm settings need FULMEN_VLLM_PYTHON (the python of a vLLM environment)")
    results = {}
    for name in names:
        run = args.out / name
        overrides = [f"run_dir={run}", f"algorithm.steps={args.steps}", "validation=null",
                     *SETTINGS[name], *args.set]  # fmt: skip
        command = [sys.executable, "-m", "fulmen", "train", str(args.config)]
        command += [arg for o in overrides for arg in ("--set", o)]
        print(f"== {name}: {' '.join(command)}", file=sys.stderr, flush=True)
        started = time.monotonic()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        steps = [
            json.loads(line)
            for line in (run / "metrics.jsonl").read_text().splitlines()
            if "mismatch/gap_mean" in line
        ]
        results[name] = {
            "steps": len(steps),
            "seconds": round(time.monotonic() - started, 1),
            **{k: statistics.fmean(s[k] for s in steps) for k in KEYS if steps and k in steps[0]},
        }
        if "mismatch/gap_max" in results[name]:
            results[name]["mismatch/gap_max"] = max(s["mismatch/gap_max"] for s in steps)
        print(json.dumps({name: results[name]}), file=sys.stderr, flush=True)
    print(json.dumps({"config": str(args.config), "engine_mismatch": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
