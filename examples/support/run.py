"""The whole support example, end to end, with its figures.

1. ``traffic.py``: the bot serves ``--sessions`` simulated customers through the gateway in
   production capture mode (sessions by ``x-session-id``), recorded into ``OUT/traffic.db``;
2. ``feedback.py``: the tickets close and their rewards are posted by session id; with
   ``--corrections`` (the default) each misrouted ticket's re-route by a reviewer is stored as
   a rewarded corrected session;
3. ``fulmen train offline.yaml``: offline SFT on the rewarded sessions (no agent runs);
4. ``evaluate.py``: held-out customers routed by the base model and by the trained adapter.

Prints one JSON line with every figure and the seconds each part took.

    python examples/support/run.py --model gemma-3-270m --sessions 64 --held-out 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluate import evaluate
from feedback import post_feedback
from traffic import serve_traffic

from fulmen.trainer.metrics import read_metrics

__all__ = ["run_pipeline"]

HERE = Path(__file__).resolve().parent


def _train(model: str, out: Path, overrides: Sequence[str]) -> dict[str, Any]:
    run_dir = out / "train"
    command = [
        sys.executable, "-m", "fulmen", "train", str(HERE / "offline.yaml"),
        "--set", f"model={model}", "--set", f"run_dir={run_dir.resolve()}",
        "--set", f"data.from_store=sqlite:///{(out / 'traffic.db').resolve()}",
    ]  # fmt: skip
    for override in overrides:
        command += ["--set", override]
    with (out / "train.log").open("w", encoding="utf-8") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    (round_,) = [r for r in read_metrics(run_dir / "metrics.jsonl") if "sft/examples" in r]
    keys = ("rollouts", "examples", "retokenized", "logprob_before", "logprob_after")
    return {f"sft_{k}": round_[f"sft/{k}"] for k in keys}


def run_pipeline(
    *,
    model: str,
    sessions: int,
    held_out: int,
    out: Path,
    temperature: float = 0.5,
    corrections: bool = True,
    train_overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the four parts; returns their figures and timings."""
    figures: dict[str, Any] = {"model": model}
    started = time.perf_counter()
    figures["temperature"] = temperature
    traffic = serve_traffic(model=model, sessions=sessions, out=out, temperature=temperature)
    figures.update(asyncio.run(traffic))
    served = time.perf_counter()
    figures.update(asyncio.run(post_feedback(out, corrections=corrections)))
    figures.update(_train(model, out, train_overrides))
    trained = time.perf_counter()
    adapter = out / "train" / "adapters" / "round-001"
    figures.update(
        asyncio.run(
            evaluate(
                model=model, adapter=adapter, held_out=held_out, traffic_sessions=sessions, out=out
            )
        )
    )
    figures.update(
        traffic_s=served - started,
        train_s=trained - served,
        total_s=time.perf_counter() - started,
    )
    return figures


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--held-out", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("runs/support"))
    parser.add_argument("--temperature", type=float, default=0.5, help="the bot's sampling")
    parser.add_argument("--corrections", action=argparse.BooleanOptionalAction, default=True,
                        help="store reviewers' re-routes of misrouted tickets")  # fmt: skip
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="extra key=value for fulmen train (repeatable)")  # fmt: skip
    args = parser.parse_args()
    figures = run_pipeline(
        model=args.model,
        sessions=args.sessions,
        held_out=args.held_out,
        out=args.out,
        temperature=args.temperature,
        corrections=args.corrections,
        train_overrides=args.overrides,
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
