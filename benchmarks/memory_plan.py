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

The engine's plan is checked the same way (``--engine-cases``): the built-in engine is started
(``fulmen serve``), its resident memory read once it is healthy, and then it is sent a batch of
distinct long prompts at once (each one a row of the running batch and an entry of its prefix
cache). The planned figure for that load is the process, the weights, one prefill chunk, the
KV of every row (prompt and completion, at the model's KV bytes per token) and the prompts'
KV in the prefix cache (within its budget); the measured one is the engine process's peak
resident memory (``VmHWM``).

    python benchmarks/memory_plan.py
    python benchmarks/memory_plan.py --cases tiny:lora:4096:0,gemma-3-270m:lora:1024:1
    python benchmarks/memory_plan.py --cases '' --engine-cases gemma-3-270m:4:1500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_CASES = (
    "tiny:lora:4096:0",
    "tiny:full:4096:0",
    "gemma-3-270m:lora:1024:0",
    "gemma-3-270m:lora:2048:1",
    "gemma-3-270m:full:1024:1",
)
DEFAULT_ENGINE_CASES = ("tiny:8:2000", "gemma-3-270m:4:1500")

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
    parser.add_argument(
        "--engine-cases",
        default=",".join(DEFAULT_ENGINE_CASES),
        help="MODEL:ROWS:PROMPT_TOKENS for the built-in engine, comma-separated ('' for none)",
    )
    args = parser.parse_args(argv)
    rows = []
    for case in filter(None, args.cases.split(",")):
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
    engines = []
    for case in filter(None, args.engine_cases.split(",")):
        model, batch, tokens = case.split(":")
        measured_case: dict[str, object] = {
            "case": case,
            **_engine_case(model, int(batch), int(tokens)),
        }
        sizes = {k: v for k, v in measured_case.items() if isinstance(v, int)}
        measured_case["ratio"] = ratio = round(sizes["measured"] / sizes["planned"], 3)
        print(
            f"engine {case:<21} planned {sizes['planned'] / 2**30:7.3f} GiB  measured "
            f"{sizes['measured'] / 2**30:7.3f} GiB  (measured/planned {ratio:.2f}); "
            f"at rest {sizes['at_rest'] / 2**30:.3f} GiB, {sizes['prompt_tokens']} prompt tokens",
            flush=True,
        )
        engines.append(measured_case)
    print(json.dumps({"memory_plan": rows, "engine": engines}))
    return 0


def _engine_case(model: str, batch: int, tokens: int) -> dict[str, int]:
    """Start the built-in engine, load it with ``batch`` distinct prompts, plan the same load."""
    from fulmen.engines.config import EngineConfig
    from fulmen.engines.memory import plan_engine
    from fulmen.engines.models import resolve_model
    from fulmen.trainer.memory_plan import PROCESS_BYTES

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = subprocess.Popen(
        [sys.executable, "-m", "fulmen.cli.serve", "--model", model, "--port", str(port),
         "--max-batch", str(batch), "--threads", "2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or engine.poll() is not None:
                raise SystemExit(f"the engine for {model} did not start")
            time.sleep(1)
        at_rest = _status(engine.pid, "VmRSS")
        usage = asyncio.run(_load(url, model, batch, tokens))
        measured = _status(engine.pid, "VmHWM")
    finally:
        engine.terminate()
        engine.wait(timeout=60)
    prompts = sum(u["prompt_tokens"] for u in usage)
    completions = sum(u["prompt_tokens"] + u["completion_tokens"] for u in usage)
    longest = max(u["prompt_tokens"] for u in usage)
    plan = plan_engine(EngineConfig(max_batch=batch, prefill_chunk_tokens=min(2048, longest)),
                       resolve_model(model))  # fmt: skip
    assert plan is not None
    per_token = plan.kv_bytes_per_token
    planned = (
        PROCESS_BYTES
        + plan.weights_bytes
        + plan.prefill_bytes
        + per_token * completions
        + min(plan.prefix_cache_bytes, per_token * prompts)
    )
    return {"planned": planned, "measured": measured, "at_rest": at_rest,
            "prompt_tokens": prompts}  # fmt: skip


async def _load(url: str, model: str, batch: int, tokens: int) -> list[dict[str, int]]:
    """Send ``batch`` distinct prompts of ``tokens`` tokens at once; return their usage."""
    from transformers import AutoTokenizer

    from fulmen.engines.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(model)))
    words = "the quick brown fox jumps over a lazy dog and runs far away from home".split()  # noqa: SIM905
    async with httpx.AsyncClient(timeout=1800) as client:

        async def one(row: int) -> dict[str, int]:
            text = " ".join(words[(row + i) % len(words)] for i in range(2 * tokens))
            ids = tokenizer.encode(f"{row} {text}", add_special_tokens=False)[:tokens]
            body = {
                "model": model,
                "messages": [{"role": "user", "content": tokenizer.decode(ids)}],
                "max_tokens": 16,
                "temperature": 0,
            }
            response = await client.post(f"{url}/v1/chat/completions", json=body)
            if response.status_code != 200:
                raise SystemExit(f"the engine refused a request: {response.text[:500]}")
            return response.json()["usage"]

        return list(await asyncio.gather(*(one(row) for row in range(batch))))


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no {field} for process {pid}")


if __name__ == "__main__":
    raise SystemExit(main())
