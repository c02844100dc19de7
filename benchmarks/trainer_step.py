"""Seconds and tokens per second of one GRPO update step, per compute dtype, on calc's prompts.

The calc agent's recorded requests (``benchmarks/workloads/calc_requests.jsonl``) are rendered
with the model's chat template; the float32 model samples ``--samples`` completions for each of
``--prompts`` of them at temperature 0.8 and its own float32 logprobs become the behaviour
logprobs, so an unchanged policy's importance ratio is exactly 1 in float32 and the first
step's ``logprob_gap`` shows what a lower-precision trainer adds. Rewards alternate inside each
prompt's group, so every sequence has a non-zero advantage and is trained.

Each setting runs in its own process (its peak RSS is its own): one warm-up step, then
``--steps`` timed ``GRPOUpdater.train_step`` calls on the same batch. Settings:

- ``float32``: today's default (float32 weights, float32 LoRA).
- ``bfloat16``: bfloat16 base weights; peft keeps the LoRA weights (the trained, master
  weights) in float32.
- ``float32+autocast``: float32 weights, ``autocast: bfloat16`` (matmuls in bfloat16).

``--device cuda`` runs the same on a GPU (the batch is still sampled on the CPU).

Prints one JSON line per setting and a final line with each setting's ratio to ``float32``::

    python benchmarks/trainer_step.py                      # Gemma 3 270M, LoRA r=16
    python benchmarks/trainer_step.py --finetune full --settings float32 bfloat16
    python benchmarks/trainer_step.py --model DIR --device cuda --prompts 16
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKLOAD = Path(__file__).parent / "workloads" / "calc_requests.jsonl"
TEMPERATURE = 0.8
SETTINGS = ("float32", "bfloat16", "float32+autocast")


def make_batch(
    model_name: str, prompts: int, samples: int, max_tokens: int
) -> list[dict[str, Any]]:
    """Sample the batch once with the float32 model: prompt ids, completion ids, logprobs."""
    import torch
    from transformers import AutoTokenizer

    from fulmen.algorithms.policy import load_causal_lm, token_logprobs
    from fulmen.engines.models import resolve_model

    path = resolve_model(model_name)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model: Any = load_causal_lm(path).eval()
    lines = WORKLOAD.read_text().splitlines()[:prompts]
    batch: list[dict[str, Any]] = []
    for p, line in enumerate(lines):
        messages = json.loads(line)["messages"]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = list(tokenizer(text, add_special_tokens=False).input_ids)
        ids = torch.tensor([prompt])
        for s in range(samples):
            torch.manual_seed(1000 * p + s)
            with torch.no_grad():
                out = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=True,
                    temperature=TEMPERATURE,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=max_tokens,
                )
            completion = out[0, len(prompt) :].tolist()
            full = torch.tensor([prompt + completion])
            positions = torch.arange(len(prompt), full.shape[1])
            with torch.no_grad():
                logprobs, _ = token_logprobs(
                    model,
                    input_ids=full,
                    attention_mask=torch.ones_like(full),
                    rows=torch.zeros_like(positions),
                    positions=positions,
                    temperature=TEMPERATURE,
                )
            batch.append(
                {
                    "rollout_id": f"r{p}-{s}",
                    "task_id": f"t{p}",
                    "call_index": 0,
                    "prompt_token_ids": prompt,
                    "completion_token_ids": completion,
                    "logprobs": logprobs.tolist(),
                    "loss_mask": [1] * len(completion),
                    "credit_weights": [1.0] * len(completion),
                    "reward": float(s % 2),
                    "rollout_reward": float(s % 2),
                }
            )
    return batch


def run_setting(args: argparse.Namespace) -> dict[str, Any]:
    """One setting in this process: build the engine, warm up, time ``args.steps`` steps."""
    import torch

    from fulmen.algorithms.grpo.config import GRPOConfig
    from fulmen.algorithms.grpo.updater import GRPOUpdater
    from fulmen.engines.models import resolve_model
    from fulmen.types.transitions import Transition

    torch.set_num_threads(args.threads)
    dtype = "bfloat16" if args.setting == "bfloat16" else "float32"
    config = GRPOConfig(
        finetune=args.finetune,
        dtype=dtype,
        temperature=TEMPERATURE,
        micro_batch_tokens=args.micro_batch_tokens,
        learning_rate=1e-5,
        device=args.device,
        autocast="bfloat16" if args.setting == "float32+autocast" else None,
    )
    engine = GRPOUpdater.from_pretrained(resolve_model(args.model), config=config)
    rows = json.loads(Path(args.batch).read_text())
    transitions = [Transition.model_validate(row) for row in rows]
    times: list[float] = []
    first: dict[str, float] = {}
    for i in range(args.steps + 1):
        started = time.perf_counter()
        metrics = engine.train_step(transitions)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
        if i == 0:
            first = metrics  # the unchanged policy: its logprob gap is the dtype's
        else:
            times.append(elapsed)
    seconds = statistics.median(times)
    trained = sum(len(r["completion_token_ids"]) for r in rows)
    processed = sum(len(r["prompt_token_ids"]) + len(r["completion_token_ids"]) for r in rows)
    return {
        "benchmark": "trainer_step",
        "setting": args.setting,
        "model": args.model,
        "finetune": args.finetune,
        "device": args.device,
        "threads": args.threads,
        "sequences": len(rows),
        "trained_tokens": trained,
        "processed_tokens": processed,
        "step_s_median": seconds,
        "step_s_all": times,
        "trained_tokens_per_s": trained / seconds,
        "processed_tokens_per_s": processed / seconds,
        "unchanged_policy_logprob_gap_mean": first.get("logprob_gap"),
        "unchanged_policy_ratio_mean": first.get("ratio_mean"),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "peak_gpu_gb": (
            torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else None
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--finetune", choices=["lora", "full"], default="lora")
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4, help="completions per prompt")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--setting", help=argparse.SUPPRESS)  # child process: one setting
    parser.add_argument("--batch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setting:
        print(json.dumps(run_setting(args)), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        batch_file = Path(tmp) / "batch.json"
        print(f"sampling {args.prompts}x{args.samples} completions ...", file=sys.stderr)
        batch = make_batch(args.model, args.prompts, args.samples, args.max_tokens)
        batch_file.write_text(json.dumps(batch))
        results: dict[str, dict[str, Any]] = {}
        for setting in args.settings:
            print(f"setting {setting} ...", file=sys.stderr)
            child = [
                sys.executable,
                __file__,
                "--setting",
                setting,
                "--batch",
                str(batch_file),
                *("--model", args.model, "--finetune", args.finetune),
                *("--steps", str(args.steps), "--threads", str(args.threads)),
                *("--micro-batch-tokens", str(args.micro_batch_tokens)),
                *("--device", args.device),
            ]
            out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
            results[setting] = json.loads(out.strip().splitlines()[-1])
            print(json.dumps(results[setting]), flush=True)
    base = results.get("float32")
    if base is not None:
        ratios = {
            name: {
                "step_speedup": base["step_s_median"] / r["step_s_median"],
                "peak_rss_ratio": r["peak_rss_gb"] / base["peak_rss_gb"],
            }
            for name, r in results.items()
        }
        print(json.dumps({"benchmark": "trainer_step", "vs_float32": ratios}), flush=True)


if __name__ == "__main__":
    main()
