"""Long prompts on Gemma 3 270M: the engine's prefill and the updater's step, before and after.

Two measurements, each point in a child process of its own so its peak memory is its own
(``VmHWM``), for the code of this checkout and for a baseline checkout given with
``--baseline DIR`` (``git worktree add DIR <commit>``: the engine before chunked prefill and
blockwise attention) in the same run:

- ``engine``: the built-in engine's batching loop (float32, one torch thread, prefix cache at
  ``fulmen serve``'s default size, ``max_batch`` 8) serves one prompt of N tokens of real text
  (this repository's docs, tokenized) with ``max_tokens`` 1: seconds to the first token
  (prefill), prompt tokens per second, and the process's peak resident memory. Then a second
  prompt sharing all but the last 512 tokens: the prefix cache's part.
- ``updater``: one GRPO step (LoRA, float32, one torch thread) on a group of two transitions,
  one of N tokens (512 of them completion) and one of 1,024: seconds and peak memory.
  ``max_seq_len`` is set above N for both checkouts (the baseline's default, 8192, would drop
  the transition unseen).

Each child may grow at most ``--memory-cap-gb`` of address space past its loaded model
(``RLIMIT_AS``), so a path that would need more fails with torch's allocation error instead of
taking the shared machine down, and at most ``--timeout-min`` minutes. Prints one JSON line
per measurement (both checkouts, their ratios) and a summary line.

    git worktree add /tmp/fulmen-base <commit>
    python benchmarks/long_prompts.py engine --baseline /tmp/fulmen-base --lengths 4096 16384 32000
    python benchmarks/long_prompts.py updater --baseline /tmp/fulmen-base --lengths 20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_COMMON = r"""
import json, resource, sys, time
from pathlib import Path

def status_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0

def cap(gb):
    size = status_kib("VmSize") * 1024 + int(gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (size, resource.RLIM_INFINITY))

def text_ids(tokenizer, length, salt=0):
    docs = sorted(Path(sys.argv[4], "docs").glob("*.md"))
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in docs[salt:] + docs[:salt])
    ids = tokenizer.encode(text, add_special_tokens=False)
    while len(ids) < length:
        ids = ids + ids
    return ids[:length]

def done(result):
    result["peak_gb"] = round(status_kib("VmHWM") / 2**20, 2)
    print("RESULT " + json.dumps(result), flush=True)
"""

_ENGINE = (
    _COMMON
    + r"""
import threading
import torch
from fulmen.engines.builtin.batching import Scheduler
from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.builtin.prefix_cache import PrefixCache
from fulmen.engines.builtin.sampling import SamplingParams
from fulmen.engines.builtin.sequence import Job, JobFailed, TokenEvent
from fulmen.engines.models import resolve_model

length, model_name, cap_gb = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
torch.set_num_threads(1)
model = ServedModel(resolve_model(model_name), served_name="bench")
result = {"length": length, "loaded_gb": round(status_kib("VmRSS") / 2**20, 2)}
shape = getattr(model, "kv_shape", None)  # the baseline has none: its serve default, 512 MiB
context = model.max_model_len * shape.bytes_per_token if shape is not None else 0
cache = PrefixCache(max_bytes=max(512 << 20, context))
scheduler = Scheduler(model, max_batch=8, prefix_cache=cache)
scheduler.start()
cap(cap_gb)

def prefill(ids):
    first, failed, ready = [], [], threading.Event()
    def sink(event):
        if isinstance(event, JobFailed):
            failed.append(event.error.message)
            ready.set()
        elif isinstance(event, TokenEvent):
            first.append(time.perf_counter())
            ready.set()
    started = time.perf_counter()
    scheduler.submit(Job(ids, SamplingParams(max_tokens=1, temperature=0.0), None, 1, sink))
    ready.wait()
    if failed:
        raise RuntimeError(failed[0][:300])
    return first[0] - started

ids = text_ids(model.tokenizer, length)
try:
    seconds = prefill(ids)
    result.update(prefill_s=round(seconds, 2), prefill_tokens_per_s=round(length / seconds, 1))
    other = text_ids(model.tokenizer, 512, salt=3)
    result["shared_prefix_prefill_s"] = round(prefill(ids[:-512] + other), 2)
except RuntimeError as exc:
    result["error"] = str(exc)
done(result)
scheduler.close()
"""
)

_UPDATER = (
    _COMMON
    + r"""
import torch
from fulmen.transitions import Transition
from fulmen.algorithms.grpo.config import GRPOConfig
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.engines.models import resolve_model
from transformers import AutoTokenizer

length, model_name, cap_gb = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
torch.set_num_threads(1)
path = resolve_model(model_name)
config = GRPOConfig(learning_rate=1e-5, max_seq_len=length + 1)
engine = GRPOUpdater.from_pretrained(path, config=config)
result = {"length": length, "loaded_gb": round(status_kib("VmRSS") / 2**20, 2)}
tokenizer = AutoTokenizer.from_pretrained(str(path))

def transition(name, ids, completion, reward):
    return Transition.model_validate({
        "rollout_id": name, "task_id": "t", "call_index": 0,
        "prompt_token_ids": ids[:-completion], "completion_token_ids": ids[-completion:],
        "logprobs": [-2.0] * completion, "loss_mask": [1] * completion,
        "credit_weights": [1.0] * completion, "reward": reward, "rollout_reward": reward,
    })

batch = [
    transition("long", text_ids(tokenizer, length), 512, 1.0),
    transition("short", text_ids(tokenizer, 1024, salt=2), 128, 0.0),
]
cap(cap_gb)
try:
    started = time.perf_counter()
    metrics = engine.train_step(batch)
    result.update(step_s=round(time.perf_counter() - started, 1), updated=metrics["updated"])
except RuntimeError as exc:
    result["error"] = str(exc)[:300]
done(result)
"""
)


def measure(code: str, checkout: Path, length: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run one measurement of ``checkout``'s code in a child process; return its result."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, "-c", code, str(length), args.model, str(args.memory_cap_gb)]
    try:
        done = subprocess.run(
            [*command, str(ROOT)],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=args.timeout_min * 60,
        )
    except subprocess.TimeoutExpired:
        return {"length": length, "error": f"did not finish in {args.timeout_min} min"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {"length": length, "error": f"exit {done.returncode}: {' | '.join(tail)[:300]}"}


def _ratio(new: dict[str, Any], old: dict[str, Any], key: str) -> float | None:
    a, b = new.get(key), old.get(key)
    return round(float(a) / float(b), 3) if a and b else None


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print one JSON line each, then a summary line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["engine", "updater"])
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--baseline", type=Path, default=None, help="checkout of the old code")
    parser.add_argument("--memory-cap-gb", type=float, default=12.0)
    parser.add_argument("--timeout-min", type=float, default=30.0)
    args = parser.parse_args(argv)
    lengths = args.lengths or ([4096, 16384, 32000] if args.what == "engine" else [20000])
    code = _ENGINE if args.what == "engine" else _UPDATER
    rows = []
    for length in lengths:
        row: dict[str, Any] = {"what": args.what, "length": length}
        row["new"] = measure(code, ROOT, length, args)
        if args.baseline is not None:
            row["baseline"] = measure(code, args.baseline, length, args)
            for key in ("prefill_s", "peak_gb", "step_s", "shared_prefix_prefill_s"):
                ratio = _ratio(row["new"], row["baseline"], key)
                if ratio is not None:
                    row[f"{key}_ratio"] = ratio
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(json.dumps({"what": args.what, "model": args.model, "rows": len(rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
