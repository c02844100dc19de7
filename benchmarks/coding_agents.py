"""Train the coding-agent recipes of ``examples/coding_agents`` on Gemma 3 270M; time and memory.

Each named config (``claude_code``, ``codex``, ``opencode``, ``ai_sdk``, ``mini_swe_agent``,
``claude_agent_sdk``) runs ``fulmen train`` end to end, one after the other, in a fresh run
folder, with the agent's prompt as the agent sends it. While it runs, the resident memory of
its process tree is sampled every second (``psutil``): the trainer, the built-in engine (the
``fulmen.cli.serve`` child) and everything else (the agents and their sandboxes), each one's
peak and the peak of their sum. After it ends, ``metrics.jsonl`` gives each step's seconds
(``time/step_s``) and its parts (rollouts ``time/rollout_s``, the update ``time/train_s``,
serving the new adapter ``time/sync_s``), whether it updated, the calls and the tokens trained.
One JSON line per agent (``--summarize`` prints the step figures of runs already made):

    python benchmarks/coding_agents.py codex claude_code --out /tmp/coding-agents
    python benchmarks/coding_agents.py ai_sdk --set algorithm.steps=1

A step's time is dominated by the update over the agent's long prompts (compute-bound on a
CPU: ``docs/long-sequences.md``), so it scales with the prompt tokens trained.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "coding_agents"
_GIB = 2**30
_UPDATE_LINE = re.compile(r"micro-batches? of (\d+) padded tokens \(the longest (\d+)")
_MAIN = "import sys; from fulmen.cli.main import main; sys.exit(main())"
STEP_KEYS = ("time/step_s", "time/rollout_s", "time/train_s", "time/sync_s")
COUNT_KEYS = ("updated", "transitions/calls", "trained_tokens", "reward/mean")


def _tree_rss(trainer: psutil.Process) -> tuple[int, int, int]:
    """Resident bytes of the trainer, its engine and every other descendant."""
    own = engine = other = 0
    try:
        own = trainer.memory_info().rss
        children = trainer.children(recursive=True)
    except psutil.Error:
        return own, engine, other
    for child in children:
        try:
            rss = child.memory_info().rss
            is_engine = "fulmen.cli.serve" in " ".join(child.cmdline())
        except psutil.Error:
            continue
        if is_engine:
            engine += rss
        else:
            other += rss
    return own, engine, other


def _steps(run_dir: Path) -> list[dict[str, Any]]:
    """The step records of ``metrics.jsonl`` (those with a step time)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if "time/step_s" in r]


def train(name: str, out: Path, overrides: list[str]) -> dict[str, Any]:
    """Run one recipe's ``fulmen train``; return its figures."""
    config = EXAMPLES / f"{name}.yaml"
    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [sys.executable, "-c", _MAIN, "train", str(config)]
    command += ["--set", f"run_dir={run_dir}"]
    for item in overrides:
        command += ["--set", item]
    log = (out / f"{name}.log").open("w")
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    trainer = psutil.Process(process.pid)
    peaks = {"trainer": 0, "engine": 0, "agents": 0, "total": 0}
    while process.poll() is None:
        own, engine, other = _tree_rss(trainer)
        for key, value in (("trainer", own), ("engine", engine), ("agents", other)):
            peaks[key] = max(peaks[key], value)
        peaks["total"] = max(peaks["total"], own + engine + other)
        time.sleep(1.0)
    log.close()
    result: dict[str, Any] = {
        "agent": name,
        "exit_code": process.returncode,
        "wall_s": round(time.monotonic() - started, 1),
        "peak_gb": {key: round(value / _GIB, 2) for key, value in peaks.items()},
        "log": str(out / f"{name}.log"),
    }
    return result | summary(run_dir)


def summary(run_dir: Path) -> dict[str, Any]:
    """Each step's seconds (whole, rollouts, update, serving) and counts, from ``metrics.jsonl``."""
    steps = _steps(run_dir)
    result: dict[str, Any] = {"steps": len(steps)}
    for key in STEP_KEYS:
        values = [float(r[key]) for r in steps if key in r]
        if values:
            result[key] = [round(v, 1) for v in values]
    for key in COUNT_KEYS:
        values = [r[key] for r in steps if key in r]
        if values:
            result[key] = values
    # The updater's log line per step: the tokens it ran (prompts included) and the longest.
    log = run_dir.parent / f"{run_dir.name}.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    batches = [(int(m[1]), int(m[2])) for m in _UPDATE_LINE.finditer(text)]
    if batches:
        result["update_padded_tokens"] = [padded for padded, _ in batches]
        result["longest_sequence"] = [longest for _, longest in batches]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("agents", nargs="+", help="config names under examples/coding_agents")
    parser.add_argument("--out", type=Path, help="run folders and logs (default: a temp dir)")
    parser.add_argument("--set", action="append", default=[], help="config override, repeatable")
    parser.add_argument(
        "--summarize",
        action="store_true",
        help="train nothing: print the step figures of the runs already under --out",
    )
    args = parser.parse_args()
    if args.summarize:
        if args.out is None:
            parser.error("--summarize reads the runs under --out")
        for name in args.agents:
            print(json.dumps({"agent": name} | summary(args.out / name)), flush=True)
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="coding-agents-"))
    out.mkdir(parents=True, exist_ok=True)
    for name in args.agents:
        if not (EXAMPLES / f"{name}.yaml").is_file():
            parser.error(f"no examples/coding_agents/{name}.yaml")
    failed = 0
    for name in args.agents:
        result = train(name, out, args.set)
        failed += result["exit_code"] != 0
        print(json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
