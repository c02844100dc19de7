"""Latency the gateway adds to a model call, against a fast local upstream.

The scripted vLLM-like upstream (tests/gateway/scripted_upstream.py) and the gateway (with an
in-memory store holding one running attempt, recording every call) each run in their own
process. This process sends the same chat request to the upstream directly and through the
gateway's tracked route, in alternating blocks so machine noise hits both paths alike.
Prints one JSON line: latency added at concurrency 1 and 32, calls/s at concurrency 32 on both
paths and their ratio (over all blocks, and the median and range of the blocks' own ratios),
and CPU per call of the gateway process and of this client (the load generator is a process on
the same cores: its CPU per call bounds both paths' throughput).

A third path, the *bare hop*, is the floor for any proxy written like the gateway: uvicorn, a
raw ASGI app and the gateway's HTTP client passing the bytes through on the same URL shape, with
no parsing and no recording. Its ratio to the direct path is what one more process between the
agent and the engine costs on this machine, whatever the proxy does; the gateway's ratio to it
is what the gateway's own work costs.

Concurrency N is N agents, each with its own ``httpx`` client (one connection), as a runner's
rollouts each build their OpenAI client from their own rollout URL. ``--shared-client`` sends
all N calls through one pooled client instead (one agent process sharing a client); httpx's
pool then scans every connection several times per request, which made that client spend
3-4 ms of CPU per call here against 0.8-1.1 ms for N single-connection clients, and its cost
per call moved with the timing of the replies.

``--production`` measures production capture instead: two gateways, each with a ``capture:``
section (sessions by ``x-session-id``, 4 calls a session, a 1 s idle timeout so sessions close
and are written during the run), at ``base_rate`` 0.1 and 1.0, against the direct path in the
same alternating blocks; the calls go through plain ``/v1`` as a deployed agent's would. The
tracked route of the 1.0 gateway (a training run's calls, each recorded at once) is measured in
the same blocks for comparison.

    python benchmarks/gateway_overhead.py [--calls-c1 600] [--calls-c32 6400] [--blocks 10]
        [--upstream-delay-ms 0] [--shared-client]
    python benchmarks/gateway_overhead.py --production [--calls-c1 ...]
    python benchmarks/gateway_overhead.py --compare-clients --upstream-delay-ms 25

``--compare-clients`` measures the gateway's own upstream client against ``httpx`` (the
maintained client, ``benchmarks/httpx_upstream.py``, injected with ``create_app(...,
upstream_client=...)``): two gateways, identical but for that client, on the tracked route, in
the same alternating blocks as the direct path. It prints each one's latency added at
concurrency 1 and 32, calls/s at 32, gateway CPU per call, and ``own_vs_httpx``: the own
client's throughput and p50 advantage in percent (positive: the own client is better). The
rule the gateway follows: keep the own client only where it wins by more than 2% of throughput
or of p50 at a realistic engine delay (20-50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from itertools import count
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "gateway" / "scripted_upstream.py"
ERROR_KINDS: Counter[str] = Counter()  # what failed, for the JSON line
BODY = {"model": "tiny-model", "messages": [{"role": "user", "content": "What is 2+2?"}]}
SESSION_CALLS = 4  # production mode: calls per session
PRODUCTION_RATES = (0.1, 1.0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def serve_gateway(
    port: int, upstream: str, base_rate: float | None, client: str = "fulmen"
) -> None:
    """Child mode: a gateway over a memory store with one running attempt (ids on stdout).

    With ``base_rate`` the gateway captures production sessions at that rate.
    """
    import uvicorn

    from fulmen.gateway import GatewayConfig, create_app
    from fulmen.gateway.capture_config import CaptureConfig, SessionKeyConfig
    from fulmen.store import open_store
    from fulmen.types import RolloutCreate

    store = await open_store("memory://", watchdog_interval=None)
    (rollout,) = await store.enqueue([RolloutCreate(input={"q": 1})])
    (claim,) = await store.claim("bench-worker")
    print(json.dumps({"rollout_id": rollout.rollout_id, "attempt_id": claim.attempt.attempt_id}))
    sys.stdout.flush()
    capture = None
    if base_rate is not None:
        session = SessionKeyConfig(header="x-session-id", idle_timeout_s=1.0)
        capture = CaptureConfig(session=session, base_rate=base_rate)
    # Concurrency 32 on the one attempt: the per-rollout cap (16 by default) would answer the
    # calls beyond it 429, cheaply, and blur the CPU per call.
    config = GatewayConfig(capture=capture, max_calls_per_rollout=64)
    if client == "httpx":
        from httpx_upstream import HttpxClient  # beside this script

        app = create_app(store, [upstream], config=config, upstream_client=HttpxClient)
    else:
        app = create_app(store, [upstream], config=config)
    server = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ws="none", access_log=False
    )
    await uvicorn.Server(server).serve()
    await store.aclose()


async def serve_bare_hop(port: int, upstream: str) -> None:
    """Child mode: the bare hop (see the module docstring) in front of ``upstream``."""
    import ssl

    import uvicorn

    from fulmen.gateway.http1 import Http1Client, Origin

    origin = Origin.parse(upstream)
    client = Http1Client(
        max_connections=512,
        keepalive_s=2.0,
        connect_timeout_s=5.0,
        read_timeout_s=60.0,
        ssl_context=ssl.create_default_context,
    )

    async def app(scope: dict, receive: Callable, send: Callable) -> None:  # type: ignore[type-arg]
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        endpoint = "/" + scope["path"].split("/v1/", 1)[1]
        body = b"".join(chunks)
        headers = {"content-type": "application/json"}
        reply = await client.request(origin, scope["method"], endpoint, headers=headers, body=body)
        try:
            content = await reply.read()
        finally:
            reply.release()
        head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]
        await send({"type": "http.response.start", "status": reply.status, "headers": head})
        await send({"type": "http.response.body", "body": content})

    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", access_log=False
    )
    await uvicorn.Server(config).serve()


async def wait_ready(url: str) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            try:
                await client.get(url)
                return
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


async def measure(
    clients: list[httpx.AsyncClient],
    url: str,
    calls: int,
    concurrency: int,
    *,
    sessions: bool = False,
) -> tuple[list[float], int, float]:
    """Latencies (s) of successful calls, error count, and wall time of the run.

    Worker ``i`` sends through ``clients[i % len(clients)]``. With ``sessions`` every call
    carries an ``x-session-id`` header naming one session per ``SESSION_CALLS`` calls (sent to
    every path, so the direct path gets the same bytes).
    """
    latencies: list[float] = []
    numbers = _CALL_NUMBERS.setdefault(url, count())
    errors = 0
    remaining = calls

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal remaining, errors
        while remaining > 0:
            remaining -= 1
            start = time.perf_counter()
            number = next(numbers)
            headers = {"x-session-id": f"s-{number // SESSION_CALLS}"} if sessions else None
            try:
                r = await client.post(url, json=BODY, headers=headers)
            except httpx.HTTPError as exc:
                errors += 1
                ERROR_KINDS[type(exc).__name__] += 1
                continue
            if r.status_code != 200:
                errors += 1
                ERROR_KINDS[f"{r.status_code}: {r.text[:120]}"] += 1
                continue
            latencies.append(time.perf_counter() - start)

    started = time.perf_counter()
    await asyncio.gather(*[worker(clients[i % len(clients)]) for i in range(concurrency)])
    return latencies, errors, time.perf_counter() - started


def new_clients(concurrency: int, *, shared: bool) -> list[httpx.AsyncClient]:
    """One single-connection client per agent, or one client pooling ``concurrency``."""
    if shared:
        pooled = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        return [httpx.AsyncClient(limits=pooled, timeout=30)]
    single = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return [httpx.AsyncClient(limits=single, timeout=30) for _ in range(concurrency)]


_CALL_NUMBERS: dict[str, count[int]] = {}


class PathRun:
    """What one path did over all its blocks: latencies, errors, wall and CPU seconds."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.block_rates: list[float] = []  # calls/s of each block
        self.wall_s = 0.0
        self.client_cpu_s = 0.0  # this (client) process, while the path's blocks ran
        self.gateway_cpu_s = 0.0  # the gateway process, while the path's blocks ran


async def compare(
    urls: dict[str, str],
    calls: int,
    concurrency: int,
    blocks: int,
    pids: dict[str, int],
    *,
    sessions: bool = False,
    shared_client: bool = False,
) -> dict[str, PathRun]:
    """Run the paths in alternating blocks (machine noise hits all alike).

    ``pids`` names the gateway process each path goes through; the gateway CPU of a path is
    that process's (a path without one, the direct path, gets that of the first gateway).
    """
    first_pid = next(iter(pids.values()))
    out = {name: PathRun() for name in urls}
    clients = {name: new_clients(concurrency, shared=shared_client) for name in urls}
    try:
        for name, url in urls.items():
            await measure(clients[name], url, 4 * concurrency, concurrency, sessions=sessions)
        for _ in range(blocks):
            for name, url in urls.items():
                pid = pids.get(name, first_pid)
                cpu0, gw0 = time.process_time(), cpu_seconds(pid)
                lat, err, wall = await measure(
                    clients[name], url, calls // blocks, concurrency, sessions=sessions
                )
                run = out[name]
                run.latencies += lat
                run.errors += err
                run.block_rates.append(len(lat) / wall)
                run.wall_s += wall
                run.client_cpu_s += time.process_time() - cpu0
                run.gateway_cpu_s += cpu_seconds(pid) - gw0
    finally:
        for group in clients.values():
            for client in group:
                await client.aclose()
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def block_ratios(path: PathRun, base: PathRun) -> list[float]:
    """``path``'s calls/s over ``base``'s, block by block (each pair ran back to back)."""
    return [a / b for a, b in zip(path.block_rates, base.block_rates, strict=True)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def start_upstream(port: int, delay_ms: float, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The scripted engine in its own process, waiting ``delay_ms`` before each reply."""
    command = [
        sys.executable,
        str(UPSTREAM),
        "--port",
        str(port),
        "--delay-s",
        str(delay_ms / 1000),
    ]
    return subprocess.Popen(command, env=env)


async def run(args: argparse.Namespace) -> dict[str, float | int]:
    up_port, gw_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = start_upstream(up_port, args.upstream_delay_ms, env)
    gateway = subprocess.Popen(
        [sys.executable, __file__, "--serve-gateway", str(gw_port),
         "--upstream", f"http://127.0.0.1:{up_port}/v1"],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    hop_port = free_port()
    hop = subprocess.Popen(
        [sys.executable, __file__, "--serve-bare-hop", str(hop_port),
         "--upstream", f"http://127.0.0.1:{up_port}/v1"],
        env=env,
    )  # fmt: skip
    try:
        assert gateway.stdout is not None
        ids = json.loads(gateway.stdout.readline())
        await wait_ready(f"http://127.0.0.1:{up_port}/v1/models")
        await wait_ready(f"http://127.0.0.1:{gw_port}/healthz")
        await wait_ready(f"http://127.0.0.1:{hop_port}/v1/models")
        direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
        path = f"/rollout/{ids['rollout_id']}/attempt/{ids['attempt_id']}/v1/chat/completions"
        tracked = f"http://127.0.0.1:{gw_port}{path}"
        urls = {"direct": direct, "gw": tracked, "hop": f"http://127.0.0.1:{hop_port}{path}"}
        cpu_before = cpu_seconds(gateway.pid), cpu_seconds(upstream.pid)
        pids = {"gw": gateway.pid, "hop": hop.pid}
        c1 = await compare(urls, args.calls_c1, 1, args.blocks, pids)
        gw_cpu = cpu_seconds(gateway.pid) - cpu_before[0]
        up_cpu = cpu_seconds(upstream.pid) - cpu_before[1]
        c32 = await compare(
            urls, args.calls_c32, 32, args.blocks, pids, shared_client=args.shared_client
        )
        async with httpx.AsyncClient() as client:
            await client.post(f"http://127.0.0.1:{gw_port}/gateway/flush")
            recorder = (await client.get(f"http://127.0.0.1:{gw_port}/healthz")).json()["recorder"]
    finally:
        for proc in (gateway, hop, upstream):
            proc.terminate()
            proc.wait(timeout=20)
    d1, g1 = c1["direct"].latencies, c1["gw"].latencies
    direct32, gw32, hop32 = c32["direct"], c32["gw"], c32["hop"]
    d32, g32 = direct32.latencies, gw32.latencies
    ratios = block_ratios(gw32, direct32)
    hop_ratios = block_ratios(hop32, direct32)
    return {
        "benchmark": "gateway_overhead",
        "upstream_delay_ms": args.upstream_delay_ms,
        "client": "shared" if args.shared_client else "per_agent",
        "p50_direct_ms_c1": round(pct(d1, 0.5), 3),
        "p50_gateway_ms_c1": round(pct(g1, 0.5), 3),
        "p50_added_ms_c1": round(pct(g1, 0.5) - pct(d1, 0.5), 3),
        "p99_added_ms_c1": round(pct(g1, 0.99) - pct(d1, 0.99), 3),
        "p50_added_ms_c32": round(pct(g32, 0.5) - pct(d32, 0.5), 3),
        "p99_added_ms_c32": round(pct(g32, 0.99) - pct(d32, 0.99), 3),
        "calls_per_s_c32": round(len(g32) / gw32.wall_s, 1),
        "calls_per_s_direct_c32": round(len(d32) / direct32.wall_s, 1),
        "throughput_ratio_c32": round(len(g32) / gw32.wall_s / (len(d32) / direct32.wall_s), 3),
        "throughput_ratio_c32_block_median": round(statistics.median(ratios), 3),
        "throughput_ratio_c32_block_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "calls_per_s_bare_hop_c32": round(len(hop32.latencies) / hop32.wall_s, 1),
        "throughput_ratio_bare_hop_c32": round(
            len(hop32.latencies) / hop32.wall_s / (len(d32) / direct32.wall_s), 3
        ),
        "throughput_ratio_bare_hop_c32_block_median": round(statistics.median(hop_ratios), 3),
        "throughput_ratio_c32_vs_bare_hop": round(
            len(g32) / gw32.wall_s / (len(hop32.latencies) / hop32.wall_s), 3
        ),
        "p50_bare_hop_added_ms_c1": round(pct(c1["hop"].latencies, 0.5) - pct(d1, 0.5), 3),
        "errors_c32": gw32.errors,
        "errors_direct_c32": direct32.errors,
        "errors_bare_hop_c32": hop32.errors,
        # CPU time is less sensitive than latency to other processes on a busy machine.
        "gateway_cpu_ms_per_call": round(1000 * gw_cpu / max(len(g1), 1), 3),
        "gateway_cpu_ms_per_call_c32": round(1000 * gw32.gateway_cpu_s / max(len(g32), 1), 3),
        # The load generator's own CPU per call (httpx), on each path: on 2 cores it competes
        # with the gateway and the upstream for the same CPU.
        "client_cpu_ms_per_call_c32": round(1000 * gw32.client_cpu_s / max(len(g32), 1), 3),
        "client_cpu_ms_per_call_direct_c32": round(
            1000 * direct32.client_cpu_s / max(len(d32), 1), 3
        ),
        "client_cpu_ms_per_call_bare_hop_c32": round(
            1000 * hop32.client_cpu_s / max(len(hop32.latencies), 1), 3
        ),
        "bare_hop_cpu_ms_per_call_c32": round(
            1000 * hop32.gateway_cpu_s / max(len(hop32.latencies), 1), 3
        ),
        "upstream_cpu_ms_per_call": round(
            1000 * up_cpu / max(len(g1) + len(d1) + len(c1["hop"].latencies), 1), 3
        ),
        "calls_c1": len(g1),
        "calls_c32": len(g32),
        "recorded_stored": recorder["stored"],
        "recorded_dropped": recorder["dropped"],
        "cpu_count": os.cpu_count() or 0,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "error_kinds": dict(ERROR_KINDS),
    }


async def run_production(args: argparse.Namespace) -> dict[str, object]:
    """Production capture at each of ``PRODUCTION_RATES`` against the direct path."""
    up_port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = start_upstream(up_port, args.upstream_delay_ms, env)
    gateways: dict[str, tuple[int, subprocess.Popen[str]]] = {}
    try:
        for rate in PRODUCTION_RATES:
            port = free_port()
            gateways[f"rate_{rate}"] = port, subprocess.Popen(
                [sys.executable, __file__, "--serve-gateway", str(port),
                 "--upstream", f"http://127.0.0.1:{up_port}/v1", "--base-rate", str(rate)],
                env=env, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
        await wait_ready(f"http://127.0.0.1:{up_port}/v1/models")
        for port, _ in gateways.values():
            await wait_ready(f"http://127.0.0.1:{port}/healthz")
        urls = {"direct": f"http://127.0.0.1:{up_port}/v1/chat/completions"}
        urls |= {n: f"http://127.0.0.1:{p}/v1/chat/completions" for n, (p, _) in gateways.items()}
        pids = {name: proc.pid for name, (_, proc) in gateways.items()}
        # For comparison: a training run's tracked calls, recorded one by one (no sessions).
        port, proc = gateways[f"rate_{PRODUCTION_RATES[-1]}"]
        assert proc.stdout is not None
        ids = json.loads(proc.stdout.readline())
        urls["tracked"] = (
            f"http://127.0.0.1:{port}/rollout/{ids['rollout_id']}"
            f"/attempt/{ids['attempt_id']}/v1/chat/completions"
        )
        pids["tracked"] = proc.pid
        c1 = await compare(urls, args.calls_c1, 1, args.blocks, pids, sessions=True)
        c32 = await compare(
            urls,
            args.calls_c32,
            32,
            args.blocks,
            pids,
            sessions=True,
            shared_client=args.shared_client,
        )
        await asyncio.sleep(1.5)  # past the idle timeout: the last sessions close and are written
        health: dict[str, dict[str, object]] = {}
        async with httpx.AsyncClient() as client:
            for name, (port, _) in gateways.items():
                await client.post(f"http://127.0.0.1:{port}/gateway/flush")
                health[name] = (await client.get(f"http://127.0.0.1:{port}/healthz")).json()
    finally:
        for _, proc in gateways.values():
            proc.terminate()
            proc.wait(timeout=20)
        upstream.terminate()
        upstream.wait(timeout=20)
    d1, d32 = c1["direct"].latencies, c32["direct"].latencies
    out: dict[str, object] = {
        "benchmark": "gateway_overhead_production",
        "upstream_delay_ms": args.upstream_delay_ms,
        "client": "shared" if args.shared_client else "per_agent",
        "session_calls": SESSION_CALLS,
        "p50_direct_ms_c1": round(pct(d1, 0.5), 3),
        "calls_per_s_direct_c32": round(len(d32) / c32["direct"].wall_s, 1),
    }
    for name in [*gateways, "tracked"]:
        g1, g32 = c1[name].latencies, c32[name]
        entry: dict[str, object] = {
            "p50_added_ms_c1": round(pct(g1, 0.5) - pct(d1, 0.5), 3),
            "p99_added_ms_c1": round(pct(g1, 0.99) - pct(d1, 0.99), 3),
            "p50_added_ms_c32": round(pct(g32.latencies, 0.5) - pct(d32, 0.5), 3),
            "throughput_ratio_c32": round(
                len(g32.latencies) / g32.wall_s / (len(d32) / c32["direct"].wall_s), 3
            ),
            "throughput_ratio_c32_block_median": round(
                statistics.median(block_ratios(g32, c32["direct"])), 3
            ),
            "gateway_cpu_ms_per_call_c1": round(1000 * c1[name].gateway_cpu_s / max(len(g1), 1), 3),
            "gateway_cpu_ms_per_call_c32": round(
                1000 * g32.gateway_cpu_s / max(len(g32.latencies), 1), 3
            ),
            "errors": c1[name].errors + g32.errors,
        }
        if name in health:
            entry |= {"capture": health[name]["capture"], "recorder": health[name]["recorder"]}
        out[name] = entry
    out |= {
        "errors_direct": c1["direct"].errors + c32["direct"].errors,
        "cpu_count": os.cpu_count() or 0,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "error_kinds": dict(ERROR_KINDS),
    }
    return out


async def run_clients(args: argparse.Namespace) -> dict[str, object]:
    """The own upstream client against httpx: two gateways, the direct path, same blocks."""
    up_port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = start_upstream(up_port, args.upstream_delay_ms, env)
    gateways: dict[str, tuple[int, subprocess.Popen[str]]] = {}
    try:
        for client in ("fulmen", "httpx"):
            port = free_port()
            gateways[client] = port, subprocess.Popen(
                [sys.executable, __file__, "--serve-gateway", str(port),
                 "--upstream", f"http://127.0.0.1:{up_port}/v1", "--client", client],
                env=env, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
        await wait_ready(f"http://127.0.0.1:{up_port}/v1/models")
        urls = {"direct": f"http://127.0.0.1:{up_port}/v1/chat/completions"}
        pids = {}
        for name, (port, proc) in gateways.items():
            await wait_ready(f"http://127.0.0.1:{port}/healthz")
            assert proc.stdout is not None
            ids = json.loads(proc.stdout.readline())
            urls[name] = (
                f"http://127.0.0.1:{port}/rollout/{ids['rollout_id']}"
                f"/attempt/{ids['attempt_id']}/v1/chat/completions"
            )
            pids[name] = proc.pid
        c1 = await compare(urls, args.calls_c1, 1, args.blocks, pids)
        c32 = await compare(urls, args.calls_c32, 32, args.blocks, pids)
    finally:
        for _, proc in gateways.values():
            proc.terminate()
            proc.wait(timeout=20)
        upstream.terminate()
        upstream.wait(timeout=20)
    d1, d32 = c1["direct"].latencies, c32["direct"]
    direct_rate = len(d32.latencies) / d32.wall_s
    out: dict[str, object] = {
        "benchmark": "gateway_upstream_clients",
        "upstream_delay_ms": args.upstream_delay_ms,
        "p50_direct_ms_c1": round(pct(d1, 0.5), 3),
        "calls_per_s_direct_c32": round(direct_rate, 1),
    }
    rates: dict[str, float] = {}
    p50s: dict[str, float] = {}
    for name in gateways:
        g1, g32 = c1[name], c32[name]
        rates[name] = len(g32.latencies) / g32.wall_s
        p50s[name] = pct(g32.latencies, 0.5)
        out[name] = {
            "p50_added_ms_c1": round(pct(g1.latencies, 0.5) - pct(d1, 0.5), 3),
            "p50_ms_c32": round(p50s[name], 3),
            "calls_per_s_c32": round(rates[name], 1),
            "throughput_ratio_c32": round(rates[name] / direct_rate, 3),
            "gateway_cpu_ms_per_call_c1": round(
                1000 * g1.gateway_cpu_s / max(len(g1.latencies), 1), 3
            ),
            "gateway_cpu_ms_per_call_c32": round(
                1000 * g32.gateway_cpu_s / max(len(g32.latencies), 1), 3
            ),
            "errors": g1.errors + g32.errors,
        }
    own_vs = statistics.median(block_ratios(c32["fulmen"], c32["httpx"]))
    out["own_vs_httpx"] = {
        "throughput_gain_pct_c32": round(100 * (rates["fulmen"] / rates["httpx"] - 1), 2),
        "throughput_gain_pct_c32_block_median": round(100 * (own_vs - 1), 2),
        "p50_gain_pct_c32": round(100 * (1 - p50s["fulmen"] / p50s["httpx"]), 2),
        "p50_added_gain_ms_c1": round(
            pct(c1["httpx"].latencies, 0.5) - pct(c1["fulmen"].latencies, 0.5), 3
        ),
    }
    out |= {
        "errors_direct": c1["direct"].errors + d32.errors,
        "cpu_count": os.cpu_count() or 0,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "error_kinds": dict(ERROR_KINDS),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls-c1", type=int, default=600)
    parser.add_argument("--calls-c32", type=int, default=6400)
    parser.add_argument("--blocks", type=int, default=10, help="alternations per figure")
    parser.add_argument(
        "--upstream-delay-ms",
        type=float,
        default=0.0,
        help="the upstream waits this long before each reply (an engine's latency; default 0)",
    )
    parser.add_argument(
        "--shared-client",
        action="store_true",
        help="at concurrency 32, one pooled client for all agents (default: one client each)",
    )
    parser.add_argument(
        "--production",
        action="store_true",
        help="production capture at base_rate 0.1 and 1.0 against the direct path",
    )
    parser.add_argument(
        "--compare-clients",
        action="store_true",
        help="the gateway's own upstream client against httpx, same run (see the docstring)",
    )
    parser.add_argument("--serve-gateway", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--client", default="fulmen", help=argparse.SUPPRESS)
    parser.add_argument("--serve-bare-hop", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--base-rate", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_gateway:
        # The same event loop `fulmen gateway` uses (uvloop when installed).
        from fulmen.cli.gateway import loop_factory

        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(
                serve_gateway(args.serve_gateway, args.upstream, args.base_rate, args.client)
            )
        return
    if args.serve_bare_hop:
        from fulmen.cli.gateway import loop_factory

        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(serve_bare_hop(args.serve_bare_hop, args.upstream))
        return
    if args.compare_clients:
        print(json.dumps(asyncio.run(run_clients(args))))
        return
    print(json.dumps(asyncio.run(run_production(args) if args.production else run(args))))


if __name__ == "__main__":
    main()
