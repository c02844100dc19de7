"""Store throughput: R rollouts x K spans through every backend, in-process and over HTTP.

For each backend (memory, SQLite, PostgreSQL when its binaries are installed) the workload runs
in-process and through the store service (``fulmen store serve`` in its own subprocess), with 1
and 8 concurrent clients. Phases, each timed from a common start (a barrier) to the last
client's end:

  enqueue   R rollouts, 50 per request
  claim     all of them, 10 per request
  single    K spans per rollout, ONE span per request
  batch     K more spans per rollout, --batch spans per request (an exporter's batches)
  complete  one update_attempt(succeeded) per rollout
  read      query_spans per rollout, checking that all 2K spans come back

A client is what a runner process is: one store (one StoreClient over HTTP) working on
--inflight rollouts at a time, each rollout's spans sent one after the other. The single HTTP
client runs in this process; 8 HTTP clients are 8 processes. In-process, 8 clients are 8 tasks
sharing one store object. ``http_sqlite_sequential_*`` is one client with one rollout in
flight: strictly one request at a time. Each span carries about 1.5 KB of attributes.

Baseline in the same run: a bare uvicorn + Starlette endpoint that answers ``{}`` to a POST of
one span, called sequentially with httpx from this process (``baseline_bare_http_req_per_s``).

Prints ONE JSON line. ``inproc_<backend>_spans_per_s`` is the batched phase in-process (an
exporter always batches; the one-span calls are ``inproc_<backend>_single_spans_per_s``);
``http_<backend>_single_spans_per_s`` / ``_batch_spans_per_s`` are one client over HTTP;
``http_<backend>_8clients_spans_per_s`` is 8 clients, one span per request.

    python benchmarks/store_throughput.py --rollouts 200 --spans 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.pg_server

from fulmen.store import Store, open_store
from fulmen.types import AttemptStatus, Claim, RolloutCreate, SpanCreate

ATTRIBUTES_BYTES = 1500
PHASES = ("enqueue", "claim", "single", "batch", "complete", "read")
Sync = Callable[[], Awaitable[None]]
CpuProbe = Callable[[], tuple[float, float]]  # (this process, server process) CPU seconds
_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def make_span(claim: Claim, n: int) -> SpanCreate:
    filler = "lorem ipsum dolor sit amet " * 40
    return SpanCreate(
        rollout_id=claim.rollout.rollout_id,
        attempt_id=claim.attempt.attempt_id,
        trace_id=f"{n % 7:032x}",
        span_id=f"{n:016x}",
        parent_id=None if n % 10 == 0 else f"{n - n % 10:016x}",
        name="llm.call" if n % 2 else "tool.run",
        attributes={
            "gen_ai.request.model": "tiny-model",
            "gen_ai.usage.input_tokens": 120 + n % 50,
            "gen_ai.usage.output_tokens": 30 + n % 20,
            "fulmen.agent": "solver",
            "input.value": filler[: ATTRIBUTES_BYTES // 2],
            "output.value": filler[: ATTRIBUTES_BYTES // 2 - 150],
        },
        start_time=1_700_000_000.0 + n,
        end_time=1_700_000_000.5 + n,
    )


# -- one client's share of the workload ---------------------------------------------------------


async def _inflight(items: list[Any], limit: int, work: Callable[[Any], Awaitable[None]],
                    errors: list[str]) -> None:  # fmt: skip
    """Run ``work`` over ``items`` with at most ``limit`` at a time; collect errors."""
    queue = list(reversed(items))

    async def worker() -> None:
        while queue:
            item = queue.pop()
            try:
                await work(item)
            except Exception as exc:  # counted and reported; the run goes on
                errors.append(repr(exc)[:300])

    await asyncio.gather(*(worker() for _ in range(max(1, min(limit, len(items))))))


async def client_phases(store: Store, index: int, share: int, args: argparse.Namespace,
                        sync: Sync, cpu: CpuProbe | None = None) -> dict[str, Any]:  # fmt: skip
    """Run every phase for one client; returns {phase: [start, end]}, CPU use and errors."""
    k, inflight = args.spans, args.inflight
    errors: list[str] = []
    times: dict[str, list[float]] = {}
    cpu_used: dict[str, list[float]] = {}
    claims: list[Claim] = []

    async def timed(phase: str, run: Callable[[], Awaitable[None]]) -> None:
        await sync()
        before = cpu() if cpu else None
        start = time.time()
        await run()
        times[phase] = [start, time.time()]
        if cpu and before:
            cpu_used[phase] = [b - a for a, b in zip(before, cpu(), strict=True)]

    async def enqueue() -> None:
        items = [RolloutCreate(input={"task": f"{index}-{j}", "text": "q" * 200})
                 for j in range(share)]  # fmt: skip
        await _inflight([items[i : i + 50] for i in range(0, share, 50)], inflight,
                        store.enqueue, errors)  # fmt: skip

    async def claim() -> None:
        while len(claims) < share:
            got = await store.claim(f"bench-{index}", limit=min(10, share - len(claims)))
            if not got:
                raise RuntimeError("the queue ran dry before every rollout was claimed")
            claims.extend(got)

    await timed("enqueue", enqueue)
    await timed("claim", claim)
    single = {c.attempt.attempt_id: [make_span(c, n) for n in range(k)] for c in claims}

    async def one_rollout(spans: list[SpanCreate]) -> None:
        for span in spans:
            await store.add_spans([span])

    await timed("single", lambda: _inflight(list(single.values()), inflight, one_rollout, errors))
    spans = [make_span(c, n) for c in claims for n in range(k, 2 * k)]
    batches = [spans[i : i + args.batch] for i in range(0, len(spans), args.batch)]
    await timed("batch", lambda: _inflight(batches, inflight, store.add_spans, errors))

    async def complete(c: Claim) -> None:
        await store.update_attempt(c.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)

    await timed("complete", lambda: _inflight(claims, inflight, complete, errors))

    async def read(c: Claim) -> None:
        page = await store.query_spans(c.rollout.rollout_id, limit=2 * k)
        if len(page.items) != 2 * k:
            raise RuntimeError(f"read {len(page.items)} spans of a rollout, not {2 * k}")

    await timed("read", lambda: _inflight(claims, inflight, read, errors))
    return {"times": times, "cpu": cpu_used, "errors": errors}


def _shares(total: int, clients: int) -> list[int]:
    return [total // clients + (1 if i < total % clients else 0) for i in range(clients)]


def _rates(results: list[dict[str, Any]], r: int, k: int) -> tuple[dict[str, float], list[str]]:
    work = {"enqueue": r, "claim": r, "single": r * k, "batch": r * k, "complete": r,
            "read": 2 * r * k}  # fmt: skip
    names = {"enqueue": "enqueue_per_s", "claim": "claim_per_s", "single": "single_spans_per_s",
             "batch": "batch_spans_per_s", "complete": "complete_per_s",
             "read": "read_spans_per_s"}  # fmt: skip
    rates: dict[str, float] = {}
    for phase in PHASES:
        spans = [res["times"][phase] for res in results if phase in res["times"]]
        elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
        rates[names[phase]] = work[phase] / max(elapsed, 1e-9)
    return rates, [e for res in results for e in res["errors"]]


# -- ways to run the clients --------------------------------------------------------------------


async def run_tasks(url: str, clients: int, args: argparse.Namespace,
                    server_pid: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """``clients`` tasks sharing one store opened in this process (in-process or one HTTP)."""
    barrier = asyncio.Barrier(clients)
    me = os.getpid()

    def cpu() -> tuple[float, float]:
        return process_cpu_s(me), process_cpu_s(server_pid) if server_pid else 0.0

    async def sync() -> None:
        await barrier.wait()

    async with open_store(url) as store:
        shares = _shares(args.rollouts, clients)
        runs = [client_phases(store, i, shares[i], args, sync, cpu) for i in range(clients)]
        return list(await asyncio.gather(*runs))


def _process_client(url: str, index: int, share: int, args: argparse.Namespace,
                    barrier: Any, results: Any) -> None:  # fmt: skip
    async def main() -> dict[str, Any]:
        async def sync() -> None:
            await asyncio.to_thread(barrier.wait, 120)

        async with open_store(url) as store:
            return await client_phases(store, index, share, args, sync)

    try:
        results.put(asyncio.run(main()))
    except BaseException as exc:
        barrier.abort()
        results.put({"times": {}, "cpu": {}, "errors": [f"client {index} died: {exc!r}"[:300]]})


def run_processes(url: str, clients: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """``clients`` processes, each with its own StoreClient."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(clients), ctx.Queue()
    shares = _shares(args.rollouts, clients)
    procs = [ctx.Process(target=_process_client, args=(url, i, shares[i], args, barrier, results))
             for i in range(clients)]  # fmt: skip
    for p in procs:
        p.start()
    out = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(30)
    return out


# -- servers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def served(db: str, workdir: Path, name: str) -> Iterator[tuple[str, int]]:
    """``fulmen store serve`` in a subprocess; yields (URL, pid) and stops it with SIGTERM."""
    log = workdir / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if k != "FULMEN_STORE_TOKEN"}
    with log.open("wb") as out:
        cmd = [sys.executable, "-m", "fulmen", "store", "serve", "--db", db, "--port", "0"]
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, env=env)
        try:
            yield _wait_for(r"at (http://127\.0\.0\.1:\d+)", log, proc), proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_for(pattern: str, log: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while True:
        match = re.search(pattern, log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start: {log.read_text()}")
        time.sleep(0.05)


_BARE_APP = """
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
async def ok(request):
    await request.body()
    return Response(b"{}", media_type="application/json")
app = Starlette(routes=[Route("/", ok, methods=["POST"])])
"""


async def bare_http_baseline(workdir: Path, requests: int, body: bytes) -> float:
    """Requests/s of httpx against a bare uvicorn + Starlette endpoint in a subprocess."""
    import httpx

    (workdir / "bare_app.py").write_text(_BARE_APP)
    log = workdir / "bare.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bare_app:app", "--port", "0", "--no-access-log",
             "--ws", "none", "--lifespan", "off"],
            cwd=workdir, stdout=out, stderr=out,
        )  # fmt: skip
        try:
            port = _wait_for(r"http://127\.0\.0\.1:(\d+)", log, proc)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                for _ in range(50):
                    await client.post("/", content=body)
                started = time.perf_counter()
                for _ in range(requests):
                    await client.post("/", content=body)
                return requests / (time.perf_counter() - started)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


# -- the run ------------------------------------------------------------------------------------


async def fresh_url(backend: str, tag: str, workdir: Path, pg_url: str | None) -> str:
    """A new, empty database of ``backend`` for one configuration."""
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{workdir / f'{tag}.db'}"
    import asyncpg

    assert pg_url is not None
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "bench_{tag}"')
        await conn.execute(f'CREATE DATABASE "bench_{tag}"')
    finally:
        await conn.close()
    return pg_url.rsplit("/", 1)[0] + f"/bench_{tag}"


def _record(out: dict[str, Any], errors: list[str], label: str,
            results: list[dict[str, Any]], args: argparse.Namespace) -> None:  # fmt: skip
    rates, errs = _rates(results, args.rollouts, args.spans)
    errors += errs
    shown = "  ".join(f"{k.removesuffix('_per_s')}={v:,.0f}/s" for k, v in rates.items())
    print(f"{label:<26} {shown}  errors={len(errs)}", file=sys.stderr)
    out.update({f"{label}_{key}": value for key, value in rates.items()})
    if len(results) == 1 and results[0]["cpu"]:
        # CPU time per request: unlike rates, barely moved by other load on the machine.
        requests = {"single": args.rollouts * args.spans,
                    "batch": -(-args.rollouts * args.spans // args.batch)}  # fmt: skip
        for phase, count in requests.items():
            client_s, server_s = results[0]["cpu"][phase]
            out[f"{label}_{phase}_client_cpu_us_per_req"] = client_s / count * 1e6
            if label.startswith("http"):
                out[f"{label}_{phase}_server_cpu_us_per_req"] = server_s / count * 1e6


async def run_all(args: argparse.Namespace, workdir: Path, pg_url: str | None) -> dict[str, Any]:
    errors: list[str] = []
    out: dict[str, Any] = {
        "rollouts": args.rollouts, "spans_per_rollout": args.spans, "batch": args.batch,
        "client_inflight": args.inflight, "attributes_bytes": ATTRIBUTES_BYTES,
    }  # fmt: skip
    body = make_span(_dummy_claim(), 1).model_dump_json().encode()
    out["baseline_bare_http_req_per_s"] = await bare_http_baseline(workdir, 1000, body)
    backends = [b for b in args.backends if b != "postgresql" or pg_url]
    for backend in backends:
        for clients in (1, 8):
            suffix = "" if clients == 1 else "_8clients"
            label = f"inproc_{backend}{suffix}"
            url = await fresh_url(backend, label, workdir, pg_url)
            _record(out, errors, label, await run_tasks(url, clients, args), args)
            label = f"http_{backend}{suffix}"
            with served(await fresh_url(backend, label, workdir, pg_url), workdir, label) as (
                base,
                pid,
            ):
                if clients == 1:
                    results = await run_tasks(base, 1, args, pid)
                else:
                    results = await asyncio.to_thread(run_processes, base, clients, args)
            _record(out, errors, label, results, args)
    sequential = argparse.Namespace(**{**vars(args), "inflight": 1})
    label = "http_sqlite_sequential"
    with served(await fresh_url("sqlite", label, workdir, pg_url), workdir, label) as (base, pid):
        _record(out, errors, label, await run_tasks(base, 1, sequential, pid), sequential)
    for backend in backends:
        out[f"inproc_{backend}_spans_per_s"] = out[f"inproc_{backend}_batch_spans_per_s"]
        out[f"http_{backend}_8clients_spans_per_s"] = out[
            f"http_{backend}_8clients_single_spans_per_s"
        ]
    out["errors"] = len(errors)
    if errors:
        out["first_errors"] = errors[:5]
    return out


def _dummy_claim() -> Claim:
    from datetime import UTC, datetime

    from fulmen.types import Attempt, Mode, Rollout, RolloutConfig, RolloutStatus

    now = datetime.now(UTC)
    return Claim(
        rollout=Rollout(rollout_id="r", input=None, mode=Mode.TRAIN, status=RolloutStatus.RUNNING,
                        config=RolloutConfig(), position=1, enqueued_at=now),
        attempt=Attempt(attempt_id="a", rollout_id="r", number=1, worker_id="w",
                        status=AttemptStatus.RUNNING, started_at=now, last_heartbeat_at=now),
    )  # fmt: skip


def _start_postgres(stack: contextlib.ExitStack) -> str | None:
    from tests.pg_server import PostgresUnavailable, postgres_server

    try:
        return stack.enter_context(postgres_server())
    except PostgresUnavailable as exc:
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=200, help="R (default 200)")
    parser.add_argument("--spans", type=int, default=10, help="K spans per rollout (default 10)")
    parser.add_argument("--batch", type=int, default=100, help="spans per batched request")
    parser.add_argument("--inflight", type=int, default=4, help="rollouts in flight per client")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["memory", "sqlite", "postgresql"],
        choices=["memory", "sqlite", "postgresql"],
        help="backends to measure (default: all three; the sequential run always uses SQLite)",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fulmen-bench-")))
        wants_pg = "postgresql" in args.backends and not args.no_postgres
        pg_url = _start_postgres(stack) if wants_pg else None
        result = asyncio.run(run_all(args, workdir, pg_url))
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in result.items()}))


if __name__ == "__main__":
    main()
