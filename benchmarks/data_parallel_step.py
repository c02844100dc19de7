"""Seconds of one GRPO update on the same batch with 1 and with W data-parallel processes.

A random-weight Llama (``--hidden``, ``--layers``, ``--vocab``) is saved once; a batch of
``--groups`` x ``--group-size`` rollouts of ``--tokens`` completion tokens (random ids, rewards
alternating inside each group so every sequence is trained) is built once. Each setting runs in
its own process: one warm-up step, then ``--steps`` timed ``GRPOUpdater.train_step`` calls on the
same batch (LoRA r=16). Settings: ``w1`` (one process, torch's default threads), ``w1-t1`` (one
process, one thread) and ``w2`` (two gloo processes on this machine, one thread each, spawned
as ``algorithm.data_parallel`` does). Prints one JSON line per setting and a final line with
each setting's ratio to ``w1`` and to ``w1-t1`` (median step seconds; < 1 is faster)::

    python benchmarks/data_parallel_step.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SETTINGS = ("w1", "w1-t1", "w2")


def build(directory: Path, args: argparse.Namespace) -> None:
    """Save the model and the batch (transitions as JSON) under ``directory``."""
    import random

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 64),
        num_key_value_heads=max(1, args.hidden // 64),
        max_position_embeddings=1024,
        pad_token_id=0,
    )
    LlamaForCausalLM(config).save_pretrained(directory / "model")
    rng = random.Random(0)
    batch: list[dict[str, Any]] = []
    for group in range(args.groups):
        for member in range(args.group_size):
            n = args.tokens + rng.randint(-args.tokens // 4, args.tokens // 4)
            batch.append(
                {
                    "rollout_id": f"g{group}m{member}",
                    "task_id": f"t{group}",
                    "call_index": 0,
                    "prompt_token_ids": [rng.randrange(3, args.vocab) for _ in range(32)],
                    "completion_token_ids": [rng.randrange(3, args.vocab) for _ in range(n)],
                    "logprobs": [-math.log(args.vocab)] * n,  # a uniform sampler's
                    "loss_mask": [1] * n,
                    "credit_weights": [1.0] * n,
                    "reward": float(member % 2),
                    "rollout_reward": float(member % 2),
                }
            )
    (directory / "batch.json").write_text(json.dumps(batch))


def measure(directory: Path, setting: str, steps: int) -> dict[str, Any]:
    """Run one setting in this process; return its timings."""
    import torch

    from fulmen.algorithms.grpo.config import GRPOConfig
    from fulmen.algorithms.grpo.updater import GRPOUpdater
    from fulmen.algorithms.parallel.config import DataParallelConfig
    from fulmen.algorithms.parallel.workers import UpdaterSpec, open_update_workers
    from fulmen.algorithms.policy import load_causal_lm
    from fulmen.types.transitions import Transition

    if setting != "w1":
        torch.set_num_threads(1)
    config = GRPOConfig(learning_rate=1e-4, micro_batch_tokens=4096)
    engine = GRPOUpdater(load_causal_lm(directory / "model"), config=config)
    batch = [
        Transition.model_validate(t) for t in json.loads((directory / "batch.json").read_text())
    ]
    workers = None
    if setting == "w2":
        os.environ["OMP_NUM_THREADS"] = "1"  # the spawned rank's torch threads
        workers = open_update_workers(DataParallelConfig(world_size=2, backend="gloo"))
        assert workers is not None
        spec = UpdaterSpec.of(engine, directory / "model")
        workers.attach(engine, spec)
    try:
        engine.train_step(batch)  # warm-up
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            metrics = engine.train_step(batch)
            times.append(time.perf_counter() - started)
    finally:
        if workers is not None:
            workers.close()
    return {
        "setting": setting,
        "threads": torch.get_num_threads(),
        "step_s_median": statistics.median(times),
        "step_s": [round(t, 3) for t in times],
        "trained_tokens": metrics["trained_tokens"],
        "micro_batches": metrics["micro_batches"],
    }


def main() -> None:
    """Build once, then run each setting in its own process and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--run", nargs=2, metavar=("DIR", "SETTING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        print(json.dumps(measure(Path(args.run[0]), args.run[1], args.steps)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        build(directory, args)
        results: dict[str, dict[str, Any]] = {}
        for setting in args.settings:
            out = subprocess.run(
                [sys.executable, __file__, "--run", tmp, setting, f"--steps={args.steps}"],
                check=True,
                capture_output=True,
                text=True,
            )
            results[setting] = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(results[setting]), flush=True)
    summary: dict[str, Any] = {
        "figure": "data_parallel_step",
        "cpu_count": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
    }
    for baseline in ("w1", "w1-t1"):  # one thread per process is the fair baseline for w2
        if baseline in results:
            base = results[baseline]["step_s_median"]
            ratios = {s: r["step_s_median"] / base for s, r in results.items()}
            summary[f"ratio_to_{baseline}"] = ratios
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
