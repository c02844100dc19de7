"""Serve the support bot to simulated customers through fulmen's gateway in production mode.

Starts the built-in engine (``fulmen serve``) and the gateway (``fulmen gateway --config
gateway.yaml``: sessions by ``x-session-id``, every session kept, idle sessions closed after
two seconds) writing into a SQLite store, then runs ``--sessions`` conversations, a few at a
time, each one customer message routed by the bot. What the gateway keeps becomes finished
``mode: production`` rollouts ``session-<id>`` with the calls' token ids and logprobs. The
customers' true departments go to ``tickets.jsonl`` for the feedback job (``feedback.py``),
which learns them later, as a help desk does when a ticket is closed.

    python examples/support/traffic.py --model gemma-3-270m --sessions 128 --out runs/support
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from bot import reply_text, route
from customers import draw_customers
from openai import AsyncOpenAI

from fulmen.engines.launcher import BuiltinLauncher, free_port

__all__ = ["TRAFFIC_SEED", "serve_traffic", "start_gateway", "wait_healthy"]

HERE = Path(__file__).resolve().parent
TRAFFIC_SEED = 1


async def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until the gateway at ``url`` answers ``/healthz`` (it is serving)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(trust_env=False) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the gateway exited with status {process.returncode}")
            try:
                if (await client.get(f"{url}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(f"the gateway at {url} did not become healthy in {timeout:.0f} s")


def start_gateway(
    engine_url: str,
    store_url: str,
    out: Path,
    port: int,
    *,
    config: Path = HERE / "gateway.yaml",
    log_name: str = "gateway.log",
) -> subprocess.Popen[bytes]:
    """Start ``fulmen gateway --config CONFIG`` in front of the engine, logging to ``OUT``."""
    command = [
        sys.executable, "-m", "fulmen", "gateway", "--config", str(config),
        "--store", store_url, "--upstream", engine_url, "--port", str(port),
        "--spill-dir", str(out / "spill"),
    ]  # fmt: skip
    with (out / log_name).open("ab") as log:  # the child keeps its own copy of the file
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


async def _converse(
    base_url: str,
    model: str,
    customers: list[tuple[str, str]],
    *,
    concurrency: int,
    temperature: float,
) -> list[dict[str, Any]]:
    """Each customer writes once; the bot routes the message and answers in its format."""
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int, text: str, department: str) -> dict[str, Any]:
        session_id = f"conv-{index:05d}"
        async with limit:
            team, output = await route(
                client, model, text, session_id=session_id, temperature=temperature
            )
        return {
            "session_id": session_id,
            "message": text,
            "department": department,  # what the ticket's resolution will reveal, later
            "answer": reply_text(team, session_id),
            "routed_to": team,
            "output": output,
        }

    try:
        return await asyncio.gather(*(one(i, t, d) for i, (t, d) in enumerate(customers)))
    finally:
        await client.close()


async def serve_traffic(
    *,
    model: str,
    sessions: int,
    out: Path,
    concurrency: int = 8,
    temperature: float = 0.5,
) -> dict[str, Any]:
    """Run the production traffic; returns figures (sessions, seconds, share routed right)."""
    out.mkdir(parents=True, exist_ok=True)
    store_url = f"sqlite:///{out / 'traffic.db'}"
    started = time.perf_counter()
    engine = BuiltinLauncher(model, max_batch=concurrency, log_path=out / "engine.log")
    await asyncio.to_thread(engine.start)
    port = free_port()
    gateway = start_gateway(engine.base_url, store_url, out, port)
    try:
        url = f"http://127.0.0.1:{port}"
        await wait_healthy(url, gateway, timeout=120)
        ready = time.perf_counter()
        customers = draw_customers(sessions, seed=TRAFFIC_SEED)
        tickets = await _converse(
            f"{url}/v1", model, customers, concurrency=concurrency, temperature=temperature
        )
        served = time.perf_counter()
        await asyncio.sleep(3.0)  # every session idle past its 2 s timeout: closed and written
    finally:
        # SIGTERM: the gateway closes the sessions still open and writes what it holds.
        gateway.send_signal(signal.SIGINT if os.name == "nt" else signal.SIGTERM)
        try:
            gateway.wait(timeout=60)
        finally:
            await asyncio.to_thread(engine.stop)
    with (out / "tickets.jsonl").open("w", encoding="utf-8") as file:
        for ticket in tickets:
            file.write(json.dumps(ticket) + "\n")
    right = sum(t["routed_to"] == t["department"] for t in tickets)
    return {
        "sessions": len(tickets),
        "routed_right": right / len(tickets),
        "startup_s": ready - started,
        "serve_s": served - ready,
        "store": store_url,
    }


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--sessions", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=Path("runs/support"))
    args = parser.parse_args()
    figures = asyncio.run(
        serve_traffic(
            model=args.model,
            sessions=args.sessions,
            out=args.out,
            concurrency=args.concurrency,
            temperature=args.temperature,
        )
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
