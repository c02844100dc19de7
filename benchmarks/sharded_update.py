"""Sharded updates against replicated ones: memory per rank and seconds per step, on CPU.

For each case (a model, LoRA or full weights, tokens per rollout) and each way of taking the
update (``single``: one process trains both rollouts; ``replicate`` and ``fsdp``: two gloo ranks,
one rollout each, ``algorithm.data_parallel.strategy``), a child process builds fulmen's GRPO
updater, spawns the other rank with fulmen's own ``open_update_workers`` and takes three GRPO
steps on two synthetic rollouts. Reported for rank 0 (the ranks hold alike; rank 0 is the one
whose baseline is clean): the peak resident memory during the steps over its resident memory
before the model was loaded (``VmHWM``, reset once the update was built: every rank loads
the whole model before it shards it, a peak the plan does not plan), the memory plan's figure
for one rank (``plan_update``, what ``fulmen plan`` reports) and the median seconds of the last
two steps. Both ranks share this machine's cores, so the seconds say what sharding costs in
communication here, not what two devices would gain. One JSON line at the end.

    python benchmarks/sharded_update.py
    python benchmarks/sharded_update.py --cases gemma-3-270m:full:512 --ways fsdp,replicate
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_CASES = ("tiny:full:1024", "gemma-3-270m:lora:512", "gemma-3-270m:full:512")
DEFAULT_WAYS = ("single", "replicate", "fsdp")

_CHILD = r"""
import gc, json, statistics, sys, time
from pathlib import Path
import torch
from fulmen.algorithms.batching import TokenSample
from fulmen.algorithms.grpo.config import GRPOConfig
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.algorithms.parallel.collective import split_samples
from fulmen.algorithms.parallel.config import DataParallelConfig
from fulmen.algorithms.parallel.workers import UpdaterSpec, open_update_workers
from fulmen.algorithms.policy import load_causal_lm
from fulmen.algorithms.update_memory import UpdateShape, plan_update
from fulmen.engines.models import resolve_model

model, finetune, tokens, way = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
kl_coef = float(sys.argv[5])
torch.set_num_threads(1 if way != "single" else 2)
torch.manual_seed(0)
directory = resolve_model(model)

def status(pid, field):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no {field} for {pid}")

def reset(pid):
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM back to the current resident size

parallel = None if way == "single" else DataParallelConfig(
    world_size=2, backend="gloo", timeout_s=1800, strategy=way
)
config = GRPOConfig(
    finetune=finetune, learning_rate=1e-5, micro_batch_tokens=tokens, max_seq_len=tokens,
    logit_chunk_tokens=256, gradient_checkpointing=True, kl_coef=kl_coef,
)
shape = UpdateShape.of(
    "grpo", config, reference_copy=kl_coef > 0 and finetune == "full", parallel=parallel
)
plan = plan_update(shape, directory, alternatives=False)
workers = open_update_workers(parallel) if parallel else None
gc.collect()
reset("self")
before = status("self", "VmRSS")
updater = GRPOUpdater(load_causal_lm(directory), config=config)
if workers:
    workers.attach(updater, UpdaterSpec.of(updater, directory), config=parallel)
gc.collect()
reset("self")  # from here: the steps' peak, what the plan plans (the build's is not planned)
vocab = int(updater.model.config.vocab_size) if hasattr(updater.model, "config") else 200
generator = torch.Generator().manual_seed(1)
samples = []
for rollout, sign in enumerate((1.0, -1.0)):
    ids = torch.randint(3, min(vocab, 30000), (tokens,), generator=generator).tolist()
    n = tokens - 1
    samples.append(TokenSample(
        input_ids=ids, positions=list(range(1, tokens)), old_logprobs=[-5.0] * n,
        advantages=[sign] * n, norm=[1.0 / (2 * n)] * n, rollout=rollout,
    ))
times = []
for step in range(3):
    started = time.perf_counter()
    part = updater.collective.share(split_samples(samples, 2)) if workers else samples
    updater.train_samples(part)
    times.append(time.perf_counter() - started)
peak = status("self", "VmHWM") - before
if workers:
    workers.close()
print(json.dumps({
    "step_s": statistics.median(times[1:]),
    "measured": peak,
    "planned_per_rank": plan.peak_bytes,
    "planned_weights_and_optimizer": plan.weights_bytes + plan.optimizer_bytes,
}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--cases",
        default=",".join(DEFAULT_CASES),
        help="MODEL:lora|full:TOKENS[:kl], comma-separated (kl: the KL penalty on, kl_coef 0.05;"
        " a full fine-tune then holds a frozen reference copy)",
    )
    parser.add_argument(
        "--ways", default=",".join(DEFAULT_WAYS), help="single, replicate, fsdp (comma-separated)"
    )
    args = parser.parse_args(argv)
    rows = []
    for case in filter(None, args.cases.split(",")):
        model, finetune, tokens, *rest = case.split(":")
        kl_coef = "0.05" if rest == ["kl"] else "0"
        by_way: dict[str, dict[str, object]] = {}
        for way in args.ways.split(","):
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, model, finetune, tokens, way, kl_coef],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                raise SystemExit(f"{case} {way} failed:\n{out.stderr[-3000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            by_way[way] = result
            gib = {k: v / 2**30 for k, v in result.items() if isinstance(v, int)}
            print(
                f"{case:<24} {way:<9} step {result['step_s']:7.2f} s  rank 0 measured "
                f"{gib['measured']:.3f} GiB, planned {gib['planned_per_rank']:.3f} GiB "
                f"(measured/planned {gib['measured'] / gib['planned_per_rank']:.2f})",
                flush=True,
            )
        row: dict[str, object] = {"case": case, **by_way}
        if "fsdp" in by_way and "replicate" in by_way:
            fsdp, replicate = by_way["fsdp"], by_way["replicate"]
            row["fsdp_over_replicate_memory"] = round(
                fsdp["measured"] / replicate["measured"],  # type: ignore[operator]
                3,
            )
            row["fsdp_over_replicate_step"] = round(fsdp["step_s"] / replicate["step_s"], 3)  # type: ignore[operator]
        rows.append(row)
    print(json.dumps({"sharded_update": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
