"""Store throughput: R rollouts x K spans through every backend, in-process and over HTTP.

For each backend (memory, SQLite, PostgreSQL when its binaries are installed), in-process and
through the store service (``fulmen store serve`` in its own subprocess, StoreClient here), with
1 and 8 concurrent clients, the workload runs these phases and times each:

  enqueue   R rollouts, 50 per request
  claim     all of them, 10 per request
  single    K spans per rollout, one span per request
  batch     K more spans per rollout, --batch spans per request (an exporter's batches)
  complete  one update_attempt(succeeded) per rollout
  read      query_spans per rollout, checking all 2K spans came back

Each span carries about 1.5 KB of attributes. The baseline measured in the same run is a bare
uvicorn + Starlette endpoint answering ``{}`` (the HTTP floor of this machine right now).
Prints ONE JSON line; ``*_spans_per_s`` of the single phase answer "one request per span",
``*_batch_spans_per_s`` the batched phase. ``inproc_<backend>_spans_per_s`` is the batched phase
in-process (a runner's exporter always batches), ``inproc_<backend>_single_spans_per_s`` the
one-span calls.

    python benchmarks/store_throughput.py --rollouts 200 --spans 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.pg_server

from fulmen.store import Store, open_store
from fulmen.types import AttemptStatus, Claim, RolloutCreate, SpanCreate

ATTRIBUTES_BYTES = 1500


class Errors:
    def __init__(self) -> None:
        self.count = 0
        self.first: list[str] = []

    def add(self, exc: BaseException) -> None:
        self.count += 1
        if len(self.first) < 5:
            self.first.append(repr(exc)[:300])


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


async def _each(
    clients: list[Store], work: Callable[[int, Store], Awaitable[None]], errors: Errors
) -> float:
    async def guarded(i: int, store: Store) -> None:
        try:
            await work(i, store)
        except Exception as exc:  # counted, reported, and the run goes on
            errors.add(exc)

    started = time.perf_counter()
    await asyncio.gather(*(guarded(i, s) for i, s in enumerate(clients)))
    return time.perf_counter() - started


async def run_workload(
    clients: list[Store], r: int, k: int, batch: int, errors: Errors
) -> dict[str, float]:
    """Run all phases with ``len(clients)`` concurrent clients; returns per-phase rates."""
    n_clients = len(clients)
    shares = [r // n_clients + (1 if i < r % n_clients else 0) for i in range(n_clients)]
    claims: list[list[Claim]] = [[] for _ in clients]

    async def enqueue(i: int, store: Store) -> None:
        items = [
            RolloutCreate(input={"task": f"{i}-{j}", "text": "q" * 200}) for j in range(shares[i])
        ]
        for start in range(0, len(items), 50):
            await store.enqueue(items[start : start + 50])

    async def claim(i: int, store: Store) -> None:
        while len(claims[i]) < shares[i]:
            got = await store.claim(f"bench-{i}", limit=min(10, shares[i] - len(claims[i])))
            if not got:
                raise RuntimeError("queue ran dry before every rollout was claimed")
            claims[i] += got

    async def single(i: int, store: Store) -> None:
        for c in claims[i]:
            for n in range(k):
                await store.add_spans([make_span(c, n)])

    async def batched(i: int, store: Store) -> None:
        spans = [make_span(c, n) for c in claims[i] for n in range(k, 2 * k)]
        for start in range(0, len(spans), batch):
            await store.add_spans(spans[start : start + batch])

    async def complete(i: int, store: Store) -> None:
        for c in claims[i]:
            await store.update_attempt(c.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)

    async def read(i: int, store: Store) -> None:
        for c in claims[i]:
            page = await store.query_spans(c.rollout.rollout_id, limit=2 * k)
            if len(page.items) != 2 * k:
                raise RuntimeError(
                    f"read {len(page.items)} spans of {c.rollout.rollout_id}, not {2 * k}"
                )

    t = {name: await _each(clients, fn, errors) for name, fn in (
        ("enqueue", enqueue), ("claim", claim), ("single", single), ("batch", batched),
        ("complete", complete), ("read", read))}  # fmt: skip
    spans = r * k
    return {
        "enqueue_per_s": r / t["enqueue"],
        "claim_per_s": r / t["claim"],
        "single_spans_per_s": spans / t["single"],
        "batch_spans_per_s": spans / t["batch"],
        "complete_per_s": r / t["complete"],
        "read_spans_per_s": 2 * spans / t["read"],
    }


# -- servers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def served(db: str, workdir: Path, name: str) -> Iterator[str]:
    """``fulmen store serve`` in a subprocess; yields its URL and stops it with SIGTERM."""
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fulmen", "store", "serve", "--db", db, "--port", "0"],
            stdout=out,
            stderr=out,
            env={k: v for k, v in os.environ.items() if k != "FULMEN_STORE_TOKEN"},
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                match = re.search(r"at (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
                if match:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {log.read_text()}")
                time.sleep(0.05)
            yield match.group(1)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


_BARE_APP = """
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
async def ok(request):
    await request.body()
    return Response(b"{}", media_type="application/json")
app = Starlette(routes=[Route("/", ok, methods=["POST"])])
"""


async def bare_http_baseline(workdir: Path, requests: int) -> float:
    """Requests/s of httpx against a bare uvicorn + Starlette endpoint in a subprocess."""
    import httpx

    (workdir / "bare_app.py").write_text(_BARE_APP)
    log = workdir / "bare.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bare_app:app", "--port", "0", "--no-access-log",
             "--log-level", "info", "--ws", "none", "--lifespan", "off"],
            cwd=workdir, stdout=out, stderr=out,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while not (m := re.search(r"http://127\.0\.0\.1:(\d+)", log.read_text())):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"bare server did not start: {log.read_text()}")
                await asyncio.sleep(0.05)
            body = make_span(_fake_claim(), 1).model_dump_json().encode()
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{m.group(1)}") as client:
                for _ in range(50):
                    await client.post("/", content=body)
                started = time.perf_counter()
                for _ in range(requests):
                    await client.post("/", content=body)
                return requests / (time.perf_counter() - started)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def _fake_claim() -> Claim:
    from datetime import UTC, datetime

    from fulmen.types import Attempt, Rollout, RolloutConfig, RolloutStatus

    now = datetime.now(UTC)
    return Claim(
        rollout=Rollout(rollout_id="r", input=None, mode="train", status=RolloutStatus.RUNNING,
                        config=RolloutConfig(), position=1, enqueued_at=now),
        attempt=Attempt(attempt_id="a", rollout_id="r", number=1, worker_id="w",
                        status=AttemptStatus.RUNNING, started_at=now, last_heartbeat_at=now),
    )  # fmt: skip


# -- configurations -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def opened(urls: list[str], **options: Any) -> AsyncIterator[list[Store]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(open_store(u, **options)) for u in urls]


async def measure(label: str, urls: list[str], args: argparse.Namespace, errors: Errors,
                  **options: Any) -> dict[str, float]:  # fmt: skip
    """Open one store per URL (one HTTP client each) and run the workload with them."""
    async with opened(urls, **options) as clients:
        return await measure_on(label, clients, args, errors)


async def measure_on(label: str, clients: list[Store], args: argparse.Namespace,
                     errors: Errors) -> dict[str, float]:  # fmt: skip
    before = errors.count
    rates = await run_workload(clients, args.rollouts, args.spans, args.batch, errors)
    shown = "  ".join(f"{k.removesuffix('_per_s')}={v:,.0f}/s" for k, v in rates.items())
    print(f"{label:<26} {shown}  errors={errors.count - before}", file=sys.stderr)
    return {f"{label}_{key}": value for key, value in rates.items()}


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


async def run_all(args: argparse.Namespace, workdir: Path, pg_url: str | None) -> dict[str, Any]:
    errors = Errors()
    out: dict[str, Any] = {"rollouts": args.rollouts, "spans_per_rollout": args.spans,
                           "batch": args.batch, "attributes_bytes": ATTRIBUTES_BYTES}  # fmt: skip
    out["baseline_bare_http_req_per_s"] = await bare_http_baseline(workdir, 1000)
    backends = ["memory", "sqlite"] + (["postgresql"] if pg_url else [])
    for backend in backends:
        for clients in (1, 8):
            suffix = "" if clients == 1 else "_8clients"
            label = f"inproc_{backend}{suffix}"
            url = await fresh_url(backend, label, workdir, pg_url)
            async with open_store(url) as store:  # one store shared by the client tasks
                out.update(await measure_on(label, [store] * clients, args, errors))
            label = f"http_{backend}{suffix}"
            url = await fresh_url(backend, label, workdir, pg_url)
            with served(url, workdir, label) as base:
                out.update(await measure(label, [base] * clients, args, errors))
    for backend in backends:
        out[f"inproc_{backend}_spans_per_s"] = out[f"inproc_{backend}_batch_spans_per_s"]
        out[f"http_{backend}_8clients_spans_per_s"] = out[
            f"http_{backend}_8clients_single_spans_per_s"
        ]
    out["errors"] = errors.count
    if errors.first:
        out["first_errors"] = errors.first
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=200, help="R (default 200)")
    parser.add_argument("--spans", type=int, default=10, help="K spans per rollout (default 10)")
    parser.add_argument("--batch", type=int, default=100, help="spans per batched request")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fulmen-bench-")))
        pg_url = None if args.no_postgres else _start_postgres(stack)
        result = asyncio.run(run_all(args, workdir, pg_url))
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in result.items()}))


def _start_postgres(stack: contextlib.ExitStack) -> str | None:
    from tests.pg_server import PostgresUnavailable, postgres_server

    try:
        return stack.enter_context(postgres_server())
    except PostgresUnavailable as exc:
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        return None


if __name__ == "__main__":
    main()
