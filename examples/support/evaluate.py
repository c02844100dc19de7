"""Held-out evaluation of the support bot: the base model against the offline-trained adapter.

Starts the built-in engine, hot-loads the adapter ``fulmen train offline.yaml`` wrote, and
routes the same held-out customers (messages that never occurred in the traffic) with each,
greedily, straight to the engine. The reward is the one the feedback job gives: 1.0 for the
right department. Reports both accuracies with their standard errors and the paired
difference with its standard error (the same messages are scored twice); every answer goes to
``OUT/eval.jsonl``.

    python examples/support/evaluate.py --adapter runs/support/train/adapters/round-001
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from bot import parse_route, route
from customers import draw_customers, held_out_customers
from openai import AsyncOpenAI
from traffic import TRAFFIC_SEED

from fulmen.engines.launcher import BuiltinLauncher

__all__ = ["evaluate", "paired_summary"]

EVAL_SEED = 2


def _se(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def paired_summary(base: list[float], tuned: list[float]) -> dict[str, float]:
    """Accuracies, their standard errors, and the paired difference with its standard error."""
    diff = [t - b for b, t in zip(base, tuned, strict=True)]
    return {
        "n": float(len(base)),
        "base": statistics.fmean(base),
        "base_se": _se(base),
        "tuned": statistics.fmean(tuned),
        "tuned_se": _se(tuned),
        "gain": statistics.fmean(diff),
        "gain_se": _se(diff),
    }


async def _answers(client: AsyncOpenAI, model: str, customers: list[tuple[str, str]]) -> list[str]:
    async def one(text: str) -> str:
        _, output = await route(client, model, text, temperature=0.0)
        return output

    return list(await asyncio.gather(*(one(t) for t, _ in customers)))


def _scores(outputs: list[str], customers: list[tuple[str, str]]) -> list[float]:
    """The feedback job's reward of each answer: 1.0 for the right department."""
    return [
        1.0 if parse_route(o) == d else 0.0 for o, (_, d) in zip(outputs, customers, strict=True)
    ]


async def evaluate(
    *, model: str, adapter: Path, held_out: int, traffic_sessions: int, out: Path
) -> dict[str, float]:
    """Score the base model and the adapter on ``held_out`` new customers (paired)."""
    traffic = draw_customers(traffic_sessions, seed=TRAFFIC_SEED)
    customers = held_out_customers(held_out, seed=EVAL_SEED, traffic=traffic)
    started = time.perf_counter()
    engine = BuiltinLauncher(model, max_batch=8, log_path=out / "eval-engine.log")
    await asyncio.to_thread(engine.start)
    client = AsyncOpenAI(base_url=engine.base_url, api_key="unused", max_retries=0, timeout=600)
    try:
        await engine.load_adapter("support-offline", str(adapter.resolve()))
        base_outputs = await _answers(client, model, customers)
        tuned_outputs = await _answers(client, "support-offline", customers)
    finally:
        await client.close()
        await asyncio.to_thread(engine.stop)
    with (out / "eval.jsonl").open("w", encoding="utf-8") as file:
        for (text, department), before, after in zip(
            customers, base_outputs, tuned_outputs, strict=True
        ):
            row = {"message": text, "department": department, "base": before, "tuned": after}
            file.write(json.dumps(row) + "\n")
    base, tuned = _scores(base_outputs, customers), _scores(tuned_outputs, customers)
    summary: dict[str, Any] = paired_summary(base, tuned)
    for department in sorted({d for _, d in customers}):
        rows = [i for i, (_, d) in enumerate(customers) if d == department]
        summary[f"base_{department}"] = statistics.fmean(base[i] for i in rows)
        summary[f"tuned_{department}"] = statistics.fmean(tuned[i] for i in rows)
    summary["eval_s"] = time.perf_counter() - started
    return summary


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument(
        "--adapter", type=Path, default=Path("runs/support/train/adapters/round-001")
    )
    parser.add_argument("--held-out", type=int, default=64)
    parser.add_argument("--traffic-sessions", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path("runs/support"))
    args = parser.parse_args()
    figures = asyncio.run(
        evaluate(
            model=args.model,
            adapter=args.adapter,
            held_out=args.held_out,
            traffic_sessions=args.traffic_sessions,
            out=args.out,
        )
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
