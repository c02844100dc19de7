"""Cost of serving ``/v1/responses`` as a chat completion, against the same call as chat.

The scripted vLLM-like upstream and the gateway run in their own processes (as in
``gateway_overhead.py``). One client sends the same question through the gateway's tracked
route as a chat completion and as a Responses call (whole and streamed), in alternating blocks
so machine noise hits every path alike; every call is recorded at token level. Prints one JSON
line: latency and the gateway's CPU time per call for each path, and what the translation
adds to each.

    python benchmarks/responses_translation.py [--calls 600] [--blocks 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_overhead import ROOT, UPSTREAM, cpu_seconds, free_port, pct, wait_ready

QUESTION = "What is 2+2?"
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (
        "chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": QUESTION}]},
    ),
    "responses": ("responses", {"model": "m", "input": QUESTION}),
    "chat_stream": (
        "chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": QUESTION}], "stream": True},
    ),
    "responses_stream": ("responses", {"model": "m", "input": QUESTION, "stream": True}),
}


async def measure(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], calls: int
) -> list[float]:
    """Latencies (s) of ``calls`` sequential calls, the whole body read."""
    out: list[float] = []
    for _ in range(calls):
        start = time.perf_counter()
        response = await client.post(url, json=body)
        await response.aread()
        response.raise_for_status()
        out.append(time.perf_counter() - start)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    up_port, gw_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = subprocess.Popen([sys.executable, str(UPSTREAM), "--port", str(up_port)], env=env)
    gateway = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "gateway_overhead.py"),
         "--serve-gateway", str(gw_port), "--upstream", f"http://127.0.0.1:{up_port}/v1"],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    latencies: dict[str, list[float]] = {name: [] for name in BODIES}
    gateway_cpu = dict.fromkeys(BODIES, 0.0)
    try:
        assert gateway.stdout is not None
        ids = json.loads(gateway.stdout.readline())
        await wait_ready(f"http://127.0.0.1:{up_port}/v1/models")
        await wait_ready(f"http://127.0.0.1:{gw_port}/healthz")
        base = (
            f"http://127.0.0.1:{gw_port}/rollout/{ids['rollout_id']}/attempt/{ids['attempt_id']}/v1"
        )
        async with httpx.AsyncClient(timeout=30) as client:
            for endpoint, body in BODIES.values():  # warm up
                await measure(client, f"{base}/{endpoint}", body, 20)
            for _ in range(args.blocks):
                for name, (endpoint, body) in BODIES.items():
                    url = f"{base}/{endpoint}"
                    before = cpu_seconds(gateway.pid)
                    latencies[name] += await measure(client, url, body, args.calls // args.blocks)
                    gateway_cpu[name] += cpu_seconds(gateway.pid) - before
            await client.post(f"http://127.0.0.1:{gw_port}/gateway/flush")
            recorder = (await client.get(f"http://127.0.0.1:{gw_port}/healthz")).json()["recorder"]
    finally:
        for proc in (gateway, upstream):
            proc.terminate()
            proc.wait(timeout=20)
    p50 = {name: round(pct(values, 0.5), 3) for name, values in latencies.items()}
    # CPU time is less sensitive than latency to other processes on a busy machine.
    cpu = {name: 1000 * gateway_cpu[name] / len(latencies[name]) for name in BODIES}
    return {
        "benchmark": "responses_translation",
        **{f"p50_{name}_ms": value for name, value in p50.items()},
        "p50_added_ms": round(p50["responses"] - p50["chat"], 3),
        "p50_added_ms_stream": round(p50["responses_stream"] - p50["chat_stream"], 3),
        **{f"gateway_cpu_ms_{name}": round(value, 3) for name, value in cpu.items()},
        "cpu_added_ms": round(cpu["responses"] - cpu["chat"], 3),
        "cpu_added_ms_stream": round(cpu["responses_stream"] - cpu["chat_stream"], 3),
        "calls_per_path": len(latencies["chat"]),
        "recorded_stored": recorder["stored"],
        "recorded_dropped": recorder["dropped"],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=600, help="calls per path")
    parser.add_argument("--blocks", type=int, default=10, help="alternations")
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
