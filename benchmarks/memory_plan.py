"""The memory plan against measured peaks: one update step per case, planned and then run.

For each case (a model, LoRA or full weights, a micro-batch length, activation checkpointing
on or off) a child process plans the update on the meta device (``plan_update``, what
``fulmen plan`` reports) and then runs it for real on the CPU: loads the model, prepares it as
the updater does, builds AdamW, runs one micro-batch of that many tokens forward and backward
and takes the optimizer step. The measured figure is the child's peak resident memory
(``VmHWM``) minus its resident memory before the model was loaded (Python, torch and
transformers already imported); the planned one is the update's peak (weights, reference,
optimizer state and the larger of the micro-batch's peak and the optimizer step). The same
dispatch-mode counter the plan uses is also run over the real step (``tracked``), which
separates what the plan's counting misses from what the allocator adds. One JSON line at the
end.

    python benchmarks/memory_plan.py
    python benchmarks/memory_plan.py --cases tiny:lora:4096:0,gemma-3-270m:lora:1024:1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_CASES = (
    "tiny:lora:4096:0",
    "tiny:full:4096:0",
    "gemma-3-270m:lora:1024:0",
    "gemma-3-270m:lora:2048:1",
    "gemma-3-270m:full:1024:1",
)

_CHILD = r"""
import gc, json, sys
import torch
from fulmen.algorithms.lora import LoraSettings
from fulmen.algorithms.optimizer import apply_gradients, build_optimizer
from fulmen.algorithms.policy import load_causal_lm, prepare_policy, token_logprobs, update_mode
from fulmen.algorithms.update_memory import UpdateShape, plan_update
from fulmen.engines.models import resolve_model
from fulmen.meta_memory import LiveBytes

model, finetune, tokens, checkpoint = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
torch.set_num_threads(2)
torch.manual_seed(0)
directory = resolve_model(model)
shape = UpdateShape(
    key="grpo", finetune=finetune, lora=LoraSettings(), dtype="float32", device="cpu",
    micro_batch_tokens=tokens, max_seq_len=tokens, logit_chunk_tokens=256,
    gradient_checkpointing=checkpoint,
)
plan = plan_update(shape, directory, alternatives=False)

class Settings:
    learning_rate, betas, weight_decay = 1e-5, (0.9, 0.999), 0.0

def resident():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

gc.collect()
open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM to the current resident size
before = resident()
policy = prepare_policy(load_causal_lm(directory), shape)
optimizer = build_optimizer(policy, Settings())
ids = torch.randint(0, 200, (1, tokens))
mask = torch.ones(1, tokens, dtype=torch.long)
positions = torch.arange(1, tokens)
rows = torch.zeros(tokens - 1, dtype=torch.long)
for step in range(2):  # the second step has AdamW's moments from the first
    with LiveBytes() as live, update_mode(policy, dropout="lora", checkpoint=checkpoint):
        logprobs, _ = token_logprobs(
            policy, input_ids=ids, attention_mask=mask, rows=rows, positions=positions,
            chunk_tokens=256,
        )
        logprobs.mean().backward()
        del logprobs
    apply_gradients(optimizer, max_grad_norm=1.0)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({
    "planned": plan.peak_bytes,
    "planned_micro_batch": plan.micro_batches[0].peak_bytes,
    "tracked_micro_batch": live.peak,
    "measured": int(hwm) * 1024 - before,
    "parameters": plan.parameters,
    "trained": plan.trained,
}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--cases",
        default=",".join(DEFAULT_CASES),
        help="MODEL:lora|full:TOKENS:CHECKPOINT(0|1), comma-separated",
    )
    args = parser.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        model, finetune, tokens, checkpoint = case.split(":")
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, model, finetune, tokens, checkpoint],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise SystemExit(f"{case} failed:\n{out.stderr[-3000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result["case"] = case
        result["ratio"] = round(result["measured"] / result["planned"], 3)
        gib = {k: round(v / 2**30, 3) for k, v in result.items() if isinstance(v, int)}
        print(
            f"{case:<28} planned {gib['planned']:7.3f} GiB  measured {gib['measured']:7.3f} GiB"
            f"  (measured/planned {result['ratio']:.2f}); micro-batch planned "
            f"{gib['planned_micro_batch']:.3f}, counted in the real step "
            f"{gib['tracked_micro_batch']:.3f}",
            flush=True,
        )
        rows.append(result)
    print(json.dumps({"memory_plan": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
