"""Fleet throughput: rollouts/s through the store service with 1, 2, 4, 8 runner processes.

Everything runs as a user would run it, each piece a real subprocess on 127.0.0.1: a fresh
``fulmen store serve`` per configuration (over a new SQLite file, or a new database on a
throwaway PostgreSQL server started by ``tests/pg_server.py``) and N runners. ``--backend
local`` starts N ``fulmen runner --store URL --agent ... --concurrency C`` processes; ``--backend
ray`` starts a local Ray head (``ray start --head --num-cpus 8``, its own port and temp dir) and
one ``fulmen runner --ray N ...``, which places the N runners as Ray actors. Once N runners have
sent a heartbeat, K rollouts are enqueued in one request; the benchmark polls the store's
counts (``stats``, every 0.2 s) until all K are final, and the time is the span from the first
rollout's ``enqueued_at`` to the last one's ``ended_at``, both stamped by the store. (Waiting
with ``wait_for_rollouts`` on all K ids re-reads them at every store write: on PostgreSQL that
took about a fifth of the store service's CPU in a profiled run.) Then everything is stopped
(the Ray head by the pids of its own processes: ``ray stop`` would stop every Ray cluster on
the machine).

Agents:
  noop  ``noop_agent`` below: returns a reward at once, no LLM call. Measures the runner <->
        store path alone (claim, heartbeats, root and reward spans, final report).
  toy   ``examples/toy/agent.py:toy_agent`` (the agent of ``scripts/train-example.sh``): one chat
        call of at most 8 tokens through a real ``fulmen gateway`` (which records the call with
        token ids in the store, and which the runner flushes before each report), reward from
        the answer. The gateway's upstream is ``--llm builtin`` (default: ``fulmen serve --model
        tiny``, the built-in engine with the tests' tiny random model, 1 torch thread) or
        ``--llm scripted`` (``tests/gateway/scripted_upstream.py``, a vLLM-shaped server with
        canned replies: no model cost, so the figure is the store/gateway/runner path).

Figures per configuration: rollouts/s, rollouts/s per core (``/ os.cpu_count()``), the ratio to
the 1-runner figure of the same back-end, store and agent in the same run (the baseline), CPU
milliseconds per rollout by kind of process (store service, runners, gateway, upstream,
PostgreSQL's server, the Ray head's processes; read from /proc over the timed part), their sum
as rollouts per CPU-second (a per-core figure that holds when other jobs share the machine,
which rollouts/s does not) and the 1-minute load average just before the timed part. Progress
and a markdown table go to stderr, ONE JSON line to stdout.

    python benchmarks/fleet_throughput.py                       # both stores, both agents
    python benchmarks/fleet_throughput.py --stores sqlite --agents noop --runners 1 2
    python benchmarks/fleet_throughput.py --llm scripted         # toy agent without a model
    python benchmarks/fleet_throughput.py --backend local ray    # also N runners on Ray
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import fulmen

ROOT = Path(__file__).resolve().parents[1]
NOOP_SPEC = "benchmarks.fleet_throughput:noop_agent"  # runners import it by name
TOY_SPEC = "agent:toy_agent"  # with examples/toy on PYTHONPATH, as its config.yaml does
RUN_MARK = "FLEET_BENCH_RUN"  # environment variable of every process the run starts
RAY_TEMP_DIR = Path("/tmp/ray-fleet-bench")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_tags = itertools.count()


@fulmen.rollout
async def noop_agent(task: Any) -> float:
    """Return a reward at once: no LLM call, no work."""
    return 1.0


def log(message: str) -> None:
    """Progress line on stderr (stdout carries the JSON result only)."""
    print(f"[fleet {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- processes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcInfo:
    """One line of /proc: what a process is and how much CPU it has used."""

    pid: int
    ppid: int
    cpu_s: float
    argv: list[str]
    mark: str | None  # the RUN_MARK value in its environment


def scan_processes() -> list[ProcInfo]:
    """Every process this user can read in /proc (empty off Linux)."""
    found = []
    needle = RUN_MARK.encode() + b"="
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        mark = next((e[len(needle) :].decode() for e in environ if e.startswith(needle)), None)
        cpu = (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime, all threads
        found.append(ProcInfo(int(proc.name), int(fields[1]), cpu, argv, mark))
    return found


def kind_of(argv: list[str]) -> str:
    """Which part of the fleet a command line is."""
    line = " ".join(argv)
    for needle, kind in (
        ("fulmen store serve", "store"),
        ("fulmen runner", "runner"),
        ("fulmen gateway", "gateway"),
        ("fulmen serve", "upstream"),
        ("fulmen.cli.serve", "upstream"),
        ("scripted_upstream", "upstream"),
        (str(RAY_TEMP_DIR), "ray"),
        ("ray::", "ray"),  # Ray's workers and agents rename themselves
        ("/site-packages/ray/", "ray"),
        ("-m ray.", "ray"),
    ):
        if needle in line:
            return kind
    return "other"


def fleet_cpu(mark: str, pg_server: str | None) -> dict[str, float]:
    """CPU seconds used so far by the run's processes, by kind, plus PostgreSQL's server."""
    procs = scan_processes()
    used: dict[str, float] = {}
    for p in procs:
        if p.mark == mark:
            kind = kind_of(p.argv)
            used[kind] = used.get(kind, 0.0) + p.cpu_s
    if pg_server is not None:  # started by pg_ctl as another user: its postmaster's tree
        port = pg_server.rsplit(":", 1)[1].split("/", 1)[0]
        master = next(
            (p.pid for p in procs if p.argv[0].endswith("postgres") and port in p.argv), None
        )
        pg = [p.cpu_s for p in procs if master is not None and master in (p.pid, p.ppid)]
        used["postgresql"] = sum(pg)
    return used


class Process:
    """One fleet member: a subprocess in its own process group, logging to files.

    Stopping sends SIGTERM to the group (a runner then reports and exits), waits, and kills
    the group if it lingers; ``stop`` is safe to call twice.
    """

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.stdout_path = logs / f"{name}.out"
        self.stderr_path = logs / f"{name}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.popen = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True
            )

    def check_alive(self) -> None:
        """Raise with the end of its log when the process has exited."""
        if self.popen.poll() is not None:
            tail = self.stderr_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{tail}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the process group, then SIGKILL it after ``timeout`` seconds."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop in {timeout:.0f} s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # leftovers of the group, if any
        self.popen.wait()


@dataclass
class Fleet:
    """Processes started together, stopped in reverse order of start."""

    env: dict[str, str]
    logs: Path
    members: list[Process] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> Process:
        """Start ``argv`` as member ``name``."""
        process = Process(name, argv, env=self.env, logs=self.logs)
        self.members.append(process)
        return process

    def stop(self) -> None:
        """Stop every member, the last started first."""
        for process in reversed(self.members):
            process.stop()


def wait_http(url: str, process: Process, timeout: float) -> None:
    """Wait until ``url`` answers 200 (the process must stay alive meanwhile)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        process.check_alive()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{process.name}: {url} did not answer within {timeout:.0f} s")


def fulmen_argv(*args: str) -> list[str]:
    """``python -m fulmen ARGS`` with this interpreter (the venv's ``fulmen`` command)."""
    return [sys.executable, "-m", "fulmen", *args]


# -- the pieces -----------------------------------------------------------------------------


def start_store(fleet: Fleet, db_url: str) -> str:
    """Start ``fulmen store serve`` over ``db_url``; return its http:// URL once healthy."""
    port = free_port()
    process = fleet.start(
        "store", fulmen_argv("store", "serve", "--db", db_url, "--port", str(port))
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", process, timeout=60)
    return url


def start_gateway(fleet: Fleet, store_url: str, upstream_v1: str) -> str:
    """Start ``fulmen gateway`` between the runners' agents and the upstream."""
    port = free_port()
    spill = str(fleet.logs / "gateway-spill")
    argv = f"gateway --store {store_url} --upstream {upstream_v1} --port {port}".split()
    process = fleet.start("gateway", fulmen_argv(*argv, "--spill-dir", spill))
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", process, timeout=60)
    return url


def start_upstream(fleet: Fleet, kind: str) -> tuple[str, str]:
    """Start the toy agent's model server; return its /v1 URL and the model name to ask for."""
    port = free_port()
    if kind == "builtin":
        argv = fulmen_argv("serve", "--model", "tiny", "--port", str(port), "--threads", "1")
        process = fleet.start("engine", argv)
        wait_http(f"http://127.0.0.1:{port}/health", process, timeout=300)
        return f"http://127.0.0.1:{port}/v1", "tiny"
    script = str(ROOT / "tests" / "gateway" / "scripted_upstream.py")
    argv = [sys.executable, script, "--port", str(port), "--content", "aaaa"]
    process = fleet.start("upstream", argv)
    wait_http(f"http://127.0.0.1:{port}/v1/models", process, timeout=60)
    return f"http://127.0.0.1:{port}/v1", "scripted"


@contextlib.contextmanager
def ray_head(env: dict[str, str]) -> Iterator[str]:
    """A local Ray head of 8 logical CPUs on its own port; yield its address, then stop it.

    ``ray stop`` ends every Ray process on the machine, other people's clusters included, so
    the head is stopped through the pids of the processes under its own temp dir.
    """
    port = free_port()
    ray = str(Path(sys.executable).with_name("ray"))
    argv = [
        *(ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1"),
        *("--num-cpus", "8", "--include-dashboard=false", "--disable-usage-stats"),
        *("--object-store-memory", "200000000", "--temp-dir", str(RAY_TEMP_DIR)),
    ]
    log(f"starting a Ray head at 127.0.0.1:{port} (temp dir {RAY_TEMP_DIR})")
    try:
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=180)
        # The address Ray recorded for its own clients (it may pick another interface).
        yield (RAY_TEMP_DIR / "ray_current_cluster").read_text().strip()
    finally:
        stop_ray_head(env[RUN_MARK])
        import shutil

        shutil.rmtree(RAY_TEMP_DIR, ignore_errors=True)


def stop_ray_head(mark: str, grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL, the Ray processes of this run (they carry its ``RUN_MARK``)."""

    def ours() -> list[int]:
        return [p.pid for p in scan_processes() if p.mark == mark and kind_of(p.argv) == "ray"]

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in ours():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while ours() and time.monotonic() < deadline:
            time.sleep(0.2)


@dataclass
class Config:
    """One measured point."""

    backend: str  # local | ray
    store: str  # sqlite | postgresql
    agent: str  # noop | toy
    runners: int
    concurrency: int
    rollouts: int
    ray_address: str | None = None  # the Ray cluster of --backend ray


def start_runners(
    fleet: Fleet, config: Config, store_url: str, gateway_url: str | None, tag: str
) -> list[Process]:
    """Start the configuration's runners: N processes, or one ``fulmen runner --ray N``."""
    spec = NOOP_SPEC if config.agent == "noop" else TOY_SPEC
    # A first heartbeat within a second tells the benchmark a runner is up; a short idle poll
    # keeps the start of the timed part from waiting on a sleeping runner.
    common = [
        *f"--store {store_url} --agent {spec} --concurrency {config.concurrency}".split(),
        *["--heartbeat-interval", "1", "--poll-interval", "0.05", "--no-instrument"],
        *(["--gateway", gateway_url] if gateway_url is not None else []),
    ]
    if config.backend == "ray":
        assert config.ray_address is not None
        ray = ["--ray", str(config.runners), "--ray-address", config.ray_address]
        argv = fulmen_argv("runner", *ray, "--worker-id", tag, *common)
        return [fleet.start("runner-ray", argv)]
    return [
        fleet.start(f"runner-{i}", fulmen_argv("runner", "--worker-id", f"{tag}-{i}", *common))
        for i in range(config.runners)
    ]


# -- one configuration ----------------------------------------------------------------------


@dataclass
class Result:
    """The figures of one configuration."""

    backend: str
    store: str
    agent: str
    runners: int
    concurrency: int
    rollouts: int
    succeeded: int
    llm_calls: int
    seconds: float
    rollouts_per_s: float
    rollouts_per_s_per_core: float
    ratio_to_1_runner: float | None
    cpu_ms_per_rollout: float
    rollouts_per_cpu_s: float
    cpu_ms_per_rollout_by_process: dict[str, float]
    load1_before: float
    workers_seen: int
    per_runner_succeeded: list[int]


@dataclass
class Timing:
    """What one timed run measured."""

    succeeded: int
    llm_calls: int
    workers: int
    seconds: float
    cpu_s: dict[str, float]  # by kind of process
    load1: float


async def wait_for_workers(store: Any, count: int, runners: list[Process], timeout: float) -> int:
    """Wait until ``count`` runners have heartbeated (they are then claiming); return how many."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for runner in runners:
            runner.check_alive()
        workers = await store.list_workers()
        if len(workers) >= count:
            return len(workers)
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{count} runners did not all heartbeat within {timeout:.0f} s")


def toy_inputs(count: int) -> list[dict[str, Any]]:
    """The toy example's training prompts, repeated up to ``count``."""
    sys.path.insert(0, str(ROOT / "examples" / "toy"))
    try:
        from agent import train_tasks  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    tasks = train_tasks()
    return [tasks[i % len(tasks)] for i in range(count)]


async def timed_run(
    config: Config,
    store_url: str,
    runners: list[Process],
    llm: tuple[str, str] | None,
    cpu: Any,
) -> Timing:
    """Enqueue K rollouts once all runners are up and time them until all are final."""
    from fulmen.store import open_store
    from fulmen.types import LLMResource, ResourcesCreate, RolloutCreate, RolloutStatus

    async with open_store(store_url) as store:
        workers = await wait_for_workers(store, config.runners, runners, 300)
        version = None
        inputs: list[Any] = list(range(config.rollouts))
        if llm is not None:
            resource = LLMResource(
                base_url=llm[0],
                model=llm[1],
                sampling={"default": {"temperature": 1.0, "max_tokens": 8}},
            )
            published = await store.add_resources(ResourcesCreate(resources={"llm": resource}))
            version = published.version
            inputs = toy_inputs(config.rollouts)
        creates = [RolloutCreate(input=x, resources_version=version) for x in inputs]
        load1 = os.getloadavg()[0]
        cpu_before = cpu()
        await store.enqueue(creates)
        stats = await wait_all_final(store, config.rollouts, runners, timeout=1800)
        cpu_after = cpu()
        final = await all_rollouts(store)
    used = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_after.items()}
    succeeded = sum(r.status == RolloutStatus.SUCCEEDED for r in final)
    ends = [r.ended_at for r in final if r.ended_at is not None]
    seconds = (max(ends) - min(r.enqueued_at for r in final)).total_seconds()
    return Timing(succeeded, stats.llm_calls, workers, seconds, used, load1)


async def wait_all_final(store: Any, count: int, runners: list[Process], timeout: float) -> Any:
    """Poll the store's counts until ``count`` rollouts are final; return the last counts."""
    from fulmen.types import RolloutStatus

    final = (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = await store.stats()
        if sum(stats.rollouts.get(s, 0) for s in final) >= count:
            return stats
        for runner in runners:
            runner.check_alive()
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{count} rollouts were not final within {timeout:.0f} s")


async def all_rollouts(store: Any) -> list[Any]:
    """Every rollout of the store, page by page."""
    from fulmen.types import RolloutQuery

    found, cursor = [], None
    while True:
        page = await store.query_rollouts(RolloutQuery(cursor=cursor, limit=1000))
        found += page.items
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


def runner_counts(runners: list[Process]) -> list[int]:
    """The ``succeeded`` counts the runners printed on exit.

    A ``fulmen runner`` prints one JSON line of counts; ``fulmen runner --ray N`` prints one
    with each runner's counts under ``workers``.
    """
    counts = []
    for runner in runners:
        for line in runner.stdout_path.read_text().splitlines():
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                printed = json.loads(line)
                workers = printed.get("workers", [printed])
                counts += [int(w["succeeded"]) for w in workers]
    return counts


async def db_url_for(store: str, workdir: Path, pg_server: str | None, tag: str) -> str:
    """A new, empty store for one configuration."""
    if store == "sqlite":
        return f"sqlite:///{workdir / f'{tag}.db'}"
    from tests.pg_server import fresh_pg_database

    assert pg_server is not None
    return await fresh_pg_database(pg_server)


def measure(
    config: Config,
    workdir: Path,
    env: dict[str, str],
    pg_server: str | None,
    upstream: tuple[str, str] | None,
) -> Result:
    """Start a fleet for ``config``, time K rollouts through it, stop it."""
    tag = f"{config.backend}-{config.store}-{config.agent}-{config.runners}r-{next(_tags)}"
    logs = workdir / tag
    logs.mkdir()
    fleet = Fleet(env, logs)
    pg = pg_server if config.store == "postgresql" else None
    try:
        db_url = asyncio.run(db_url_for(config.store, workdir, pg_server, tag))
        store_url = start_store(fleet, db_url)
        gateway_url = None
        if config.agent == "toy":
            assert upstream is not None
            gateway_url = start_gateway(fleet, store_url, upstream[0])
        runners = start_runners(fleet, config, store_url, gateway_url, tag)
        timing = asyncio.run(
            timed_run(
                config,
                store_url,
                runners,
                upstream if config.agent == "toy" else None,
                lambda: fleet_cpu(env[RUN_MARK], pg),
            )
        )
    finally:
        fleet.stop()
    rate = config.rollouts / timing.seconds
    per_rollout = {
        k: round(v / config.rollouts * 1000, 2) for k, v in sorted(timing.cpu_s.items()) if v > 0
    }
    return Result(
        backend=config.backend,
        store=config.store,
        agent=config.agent,
        runners=config.runners,
        concurrency=config.concurrency,
        rollouts=config.rollouts,
        succeeded=timing.succeeded,
        llm_calls=timing.llm_calls,
        seconds=round(timing.seconds, 3),
        rollouts_per_s=round(rate, 2),
        rollouts_per_s_per_core=round(rate / (os.cpu_count() or 1), 2),
        ratio_to_1_runner=None,
        cpu_ms_per_rollout=round(sum(per_rollout.values()), 2),
        rollouts_per_cpu_s=round(1000 / max(sum(per_rollout.values()), 1e-9), 1),
        cpu_ms_per_rollout_by_process=per_rollout,
        load1_before=round(timing.load1, 2),
        workers_seen=timing.workers,
        per_runner_succeeded=runner_counts(runners),
    )


# -- the run --------------------------------------------------------------------------------


def markdown(results: list[Result]) -> str:
    """The results as a markdown table."""
    lines = [
        "| backend | store | agent | runners | K | rollouts/s | per core | vs 1 runner "
        "| CPU ms/rollout | rollouts/CPU-s | load1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = "" if r.ratio_to_1_runner is None else f"{r.ratio_to_1_runner:.2f}x"
        lines.append(
            f"| {r.backend} | {r.store} | {r.agent} | {r.runners} | {r.rollouts} "
            f"| {r.rollouts_per_s:.1f} | {r.rollouts_per_s_per_core:.1f} | {ratio} "
            f"| {r.cpu_ms_per_rollout:.1f} | {r.rollouts_per_cpu_s:.0f} | {r.load1_before:.2f} |"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def postgres(wanted: bool) -> Iterator[str | None]:
    """A throwaway PostgreSQL server when ``wanted`` (tests/pg_server.py), else ``None``."""
    if not wanted:
        yield None
        return
    from tests.pg_server import postgres_server

    with postgres_server() as url:
        yield url


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's options."""
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument(
        "--backend",
        nargs="+",
        default=["local"],
        choices=["local", "ray"],
        help="local: N `fulmen runner` processes; ray: one `fulmen runner --ray N` on a local "
        "Ray head started by the benchmark (default: local)",
    )
    parser.add_argument(
        "--stores", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"]
    )
    parser.add_argument("--agents", nargs="+", default=["noop", "toy"], choices=["noop", "toy"])
    parser.add_argument("--rollouts", type=int, default=600, help="K for the noop agent")
    parser.add_argument("--toy-rollouts", type=int, default=128, help="K for the toy agent")
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts per runner at once")
    parser.add_argument(
        "--llm",
        choices=["builtin", "scripted"],
        default="builtin",
        help="the toy agent's model: the built-in engine with the tiny test model, or a "
        "scripted vLLM-shaped upstream (no model cost)",
    )
    parser.add_argument("--keep-logs", action="store_true", help="print and keep the log dir")
    parser.add_argument(
        "--workdir", type=Path, help="put stores and logs here and keep them (default: a temp dir)"
    )
    return parser.parse_args(argv)


def with_ratios(results: list[Result]) -> None:
    """Fill ``ratio_to_1_runner`` from the 1-runner result of the same series."""
    for r in results:
        base = next(
            (
                b
                for b in results
                if (b.backend, b.store, b.agent, b.runners) == (r.backend, r.store, r.agent, 1)
            ),
            None,
        )
        if base is not None:
            r.ratio_to_1_runner = round(r.rollouts_per_s / base.rollouts_per_s, 2)


def main(argv: list[str] | None = None) -> None:
    """Run every configuration and print the JSON line."""
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))  # for tests.pg_server
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "examples" / "toy"), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fulmen-fleet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Every process of the run carries this: its CPU is counted by it, and a leftover can be
    # found (the CI test does).
    env[RUN_MARK] = str(workdir.resolve())
    results: list[Result] = []
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.workdir is None and not args.keep_logs:
            import shutil

            stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        else:
            log(f"logs in {workdir}")
        pg_server = stack.enter_context(postgres("postgresql" in args.stores))
        upstream = None
        shared = Fleet(env, workdir)  # the toy agent's model server, for the whole run
        stack.callback(shared.stop)
        if "toy" in args.agents:
            upstream = start_upstream(shared, args.llm)
        for backend in args.backend:
            with ray_head(env) if backend == "ray" else contextlib.nullcontext() as address:
                for store, agent in itertools.product(args.stores, args.agents):
                    k = args.rollouts if agent == "noop" else args.toy_rollouts
                    for n in args.runners:
                        config = Config(backend, store, agent, n, args.concurrency, k, address)
                        log(f"{backend} {store} {agent}: {n} runner(s) x {args.concurrency}, K={k}")
                        result = measure(config, workdir, env, pg_server, upstream)
                        results.append(result)
                        log(
                            f"  {result.rollouts_per_s:.1f} rollouts/s ({result.succeeded}/{k} "
                            f"succeeded in {result.seconds:.2f} s; CPU ms per rollout "
                            f"{result.cpu_ms_per_rollout_by_process}; load1 "
                            f"{result.load1_before:.2f}; per runner {result.per_runner_succeeded})"
                        )
    with_ratios(results)
    print(markdown(results), file=sys.stderr)
    out = {
        "cpu_count": os.cpu_count(),
        "llm": None if upstream is None else args.llm,
        "toy_llm_path": None
        if upstream is None
        else (
            "fulmen gateway -> fulmen serve --model tiny (built-in engine, 1 thread)"
            if args.llm == "builtin"
            else "fulmen gateway -> tests/gateway/scripted_upstream.py (canned replies)"
        ),
        "wall_s": round(time.monotonic() - started, 1),
        "results": [asdict(r) for r in results],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
