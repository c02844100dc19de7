"""How far the built-in engine's recorded logprobs are from the float32 trainer's, per dtype.

The engine (in this process, prefix cache on) samples 24 tokens at temperature 0.8 for the first
8 requests of ``benchmarks/workloads/calc_requests.jsonl``; the trainer's ``token_logprobs``
recomputes the same tokens' logprobs in float32. Reports the largest and mean absolute
difference and the largest and mean deviation of the per-token importance ratio
``exp(trainer - engine)`` from 1, i.e. what an unchanged policy's ratio would show. Prints one
JSON line per dtype.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
from pathlib import Path
from typing import Any

import torch

from fulmen.algorithms.policy import load_causal_lm, token_logprobs
from fulmen.engines.builtin.batching import Scheduler
from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.builtin.prefix_cache import PrefixCache
from fulmen.engines.builtin.sampling import SamplingParams
from fulmen.engines.builtin.sequence import Job, JobFailed, JobStarted, TokenEvent
from fulmen.engines.builtin.server import render_chat
from fulmen.engines.models import resolve_model

WORKLOAD = Path(__file__).parent / "workloads" / "calc_requests.jsonl"
TEMPERATURE = 0.8


def engine_samples(
    path: Path, dtype: str, requests: int
) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt ids, sampled ids, recorded logprobs) of ``requests`` calc prompts."""
    model = ServedModel(path, served_name="bench", dtype=dtype)
    lines = WORKLOAD.read_text().splitlines()[:requests]
    prompts = [render_chat(model, json.loads(line)["messages"], None, True, None) for line in lines]
    scheduler = Scheduler(model, max_batch=8, prefix_cache=PrefixCache(max_bytes=256 << 20))
    scheduler.start()
    out: list[tuple[list[int], list[int], list[float], threading.Event]] = []
    try:
        for seed, prompt in enumerate(prompts):
            tokens: list[int] = []
            logprobs: list[float] = []
            done = threading.Event()

            def sink(
                event: JobStarted | JobFailed | TokenEvent,
                tokens: list[int] = tokens,
                logprobs: list[float] = logprobs,
                done: threading.Event = done,
            ) -> None:
                if isinstance(event, JobFailed):
                    done.set()
                elif isinstance(event, TokenEvent):
                    tokens.append(event.token_id)
                    logprobs.append(event.logprob)
                    if event.finish_reason is not None:
                        done.set()

            params = SamplingParams(
                max_tokens=24, temperature=TEMPERATURE, seed=seed, ignore_eos=True
            )
            scheduler.submit(Job(prompt, params, None, 1, sink))
            out.append((prompt, tokens, logprobs, done))
        for *_, done in out:
            done.wait(1800)
    finally:
        scheduler.close()
    return [(p, t, lp) for p, t, lp, _ in out]


def gaps(path: Path, samples: list[tuple[list[int], list[int], list[float]]]) -> list[float]:
    """Engine minus trainer logprob for every sampled token."""
    trainer: Any = load_causal_lm(path).eval()
    out: list[float] = []
    for prompt, tokens, recorded in samples:
        ids = torch.tensor([prompt + tokens])
        positions = torch.arange(len(prompt), ids.shape[1])
        with torch.no_grad():
            reference, _ = token_logprobs(
                trainer,
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                rows=torch.zeros_like(positions),
                positions=positions,
                temperature=TEMPERATURE,
            )
        out += [a - b for a, b in zip(recorded, reference.tolist(), strict=True)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    path = resolve_model(args.model)
    for dtype in args.dtypes:
        diff = gaps(path, engine_samples(path, dtype, args.requests))
        ratio = [abs(math.exp(-g) - 1) for g in diff]
        print(
            json.dumps(
                {
                    "benchmark": "engine_logprob_gap",
                    "model": args.model,
                    "dtype": dtype,
                    "tokens": len(diff),
                    "max_abs_gap": max(abs(g) for g in diff),
                    "mean_abs_gap": sum(abs(g) for g in diff) / len(diff),
                    "max_ratio_deviation": max(ratio),
                    "mean_ratio_deviation": sum(ratio) / len(ratio),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
