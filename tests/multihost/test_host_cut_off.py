"""Four hosts made of network namespaces: PostgreSQL + the store service (token on) on one, the
trainer with the built-in engine (``tiny``) and a gateway on another, runners on two more.

The toy example trains with rollouts run on the runner hosts, one of them cut off mid-step (its
switch port taken down, the processes left running): the store's watchdog finds its attempts
lost, they are retried on the other host, every rollout is counted once, the run finishes and
the reward rises. Prints time-to-detect and
the number of retried attempts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulmen.trainer.metrics import read_metrics
from tests.multihost.fabric import Fabric, netns_unavailable_reason, tail
from tests.pg_server import PostgresUnavailable, _as_postgres, _find_bin, is_postgres_required

pytest.importorskip("torch")
pytest.importorskip("openai")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "examples" / "toy"
TOKEN, GATEWAY_TOKEN = "multihost-store-secret", "multihost-gateway-secret"
STORE_PORT, GATEWAY_PORT, PG_PORT = 4747, 8100, 5432
TASKS, GROUP = 4, 8
# r1 is cut off while an attempt of its runs: its agent takes two seconds more
# (tests/multihost/slow_agent.py).
AGENTS = {"r1": "tests.multihost.slow_agent:slow_toy_agent", "r2": "agent:toy_agent"}
HEARTBEAT_TIMEOUT_S = 12.0  # rollouts.heartbeat_timeout_s: runners here beat every second


@pytest.fixture
def fabric() -> Iterator[Fabric]:
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    fabric = Fabric()
    try:
        for host in ("db", "eng", "r1", "r2"):
            fabric.add_host(host)
        yield fabric
    finally:
        fabric.close()


@pytest.fixture
def postgres(fabric: Fabric) -> Iterator[str]:
    """PostgreSQL on the db host, on its loopback (only the store service talks to it)."""
    try:
        initdb, pg_ctl, createdb = (_find_bin(n) for n in ("initdb", "pg_ctl", "createdb"))
    except PostgresUnavailable as exc:
        if is_postgres_required():
            raise
        pytest.skip(str(exc))
    root = Path(tempfile.mkdtemp(prefix="fulmen-mh-pg-"))
    shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    subprocess.run(_as_postgres([initdb, "-D", str(data), "-U", "postgres", "-A", "trust",
                                 "--no-sync"]), check=True, capture_output=True)  # fmt: skip
    options = f"-p {PG_PORT} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    start = [pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"]
    result = fabric.run("db", _as_postgres(start), timeout=60)
    assert result.returncode == 0, result.stderr
    try:
        made = fabric.run("db", _as_postgres([createdb, "-h", "127.0.0.1", "-p", str(PG_PORT),
                                              "-U", "postgres", "fulmen"]), timeout=30)  # fmt: skip
        assert made.returncode == 0, made.stderr
        yield f"postgresql://postgres@127.0.0.1:{PG_PORT}/fulmen"
    finally:
        fabric.run("db", _as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "-w",
                                       "stop"]), timeout=60)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def _env(tmp_path: Path, host: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}
    env["FULMEN_STORE_TOKEN"] = TOKEN
    env["FULMEN_SPILL_DIR"] = str(tmp_path / f"spill-{host}")  # one per host, as on machines
    env["PYTHONPATH"] = str(REPO)
    return env


def _probe(fabric: Fabric, tmp_path: Path, host: str, *args: str, timeout: float) -> Any:
    result = fabric.run(host, [sys.executable, "-m", "tests.multihost.probe", *args],
                        cwd=REPO, env=_env(tmp_path, host), timeout=timeout)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _train(fabric: Fabric, tmp_path: Path, database: str, *, steps: int) -> dict[str, Any]:
    """Run one training over the four hosts; return the store's report and the figures."""
    logs = tmp_path / "cut"
    logs.mkdir()
    store_url = f"http://{fabric.addresses['db']}:{STORE_PORT}"
    gateway_url = f"http://{fabric.addresses['eng']}:{GATEWAY_PORT}"
    python = [sys.executable, "-m", "fulmen"]
    store = fabric.start("db", [*python, "store", "serve", "--db", database, "--host",
                                fabric.addresses["db"], "--port", str(STORE_PORT),
                                "--watchdog-interval", "0.5"],
                         log=logs / "store.log", env=_env(tmp_path, "db"))  # fmt: skip
    _probe(fabric, tmp_path, "eng", "wait", f"{store_url}/health", timeout=90)
    run_dir = logs / "run"
    trainer = fabric.start("eng", [
        *python, "train", str(TOY / "config.yaml"), "--store", store_url,
        "--set", f"run_dir={run_dir}", "--set", f"algorithm.steps={steps}",
        "--set", f"algorithm.tasks_per_step={TASKS}", "--set", f"algorithm.group_size={GROUP}",
        "--set", "validation=null", "--set", "data.val=null", "--set", "rollouts.concurrency=1",
        "--set", f"rollouts.heartbeat_timeout_s={HEARTBEAT_TIMEOUT_S}",
        # Faster than the example's 0.01: the reward takes off within 16 steps (on one host at
        # step 6 to 9 in four seeds; over these hosts at step 7, or it creeps).
        "--set", "algorithm.grpo.learning_rate=0.05",
    ], log=logs / "trainer.log", env=_env(tmp_path, "eng"), cwd=REPO)  # fmt: skip
    started = [store, trainer]
    try:
        # The trainer's engine listens on the eng host's loopback; its gateway for the
        # runner hosts forwards there, on the eng host's address.
        engine = _probe(fabric, tmp_path, "eng", "llm-url", store_url, timeout=200)["base_url"]
        gateway = fabric.start("eng", [*python, "gateway", "--store", store_url, "--upstream",
                                       engine, "--host", fabric.addresses["eng"], "--port",
                                       str(GATEWAY_PORT), "--gateway-token", GATEWAY_TOKEN],
                               log=logs / "gateway.log", env=_env(tmp_path, "eng"))  # fmt: skip
        started.append(gateway)
        _probe(fabric, tmp_path, "r1", "wait", f"{gateway_url}/healthz", timeout=90)
        runners = [
            fabric.start(
                host,
                [
                    *python,
                    "runner",
                    "--store",
                    store_url,
                    "--agent",
                    AGENTS[host],
                    "--gateway",
                    gateway_url,
                    "--gateway-api-key",
                    GATEWAY_TOKEN,
                    "--worker-id",
                    host,
                    "--concurrency",
                    "4",
                    "--heartbeat-interval",
                    "1",
                    "--poll-interval",
                    "0.1",
                ],
                log=logs / f"runner-{host}.log",
                env=_env(tmp_path, host),
                cwd=TOY,
            )
            for host in ("r1", "r2")
        ]
        started += runners
        # From the db host, the moment the store sees r1 running an attempt.
        cut_at = _probe(fabric, tmp_path, "db", "cut", store_url, "r1",
                        *fabric.cut_command("r1"), timeout=200)["cut_at"]  # fmt: skip
        trainer.wait(timeout=300)
        assert trainer.returncode == 0, tail(logs / "trainer.log")
        report = _probe(fabric, tmp_path, "db", "report", store_url, timeout=60)
    finally:
        for process in reversed(started):
            fabric.stop(process, timeout=10)
    metrics = [r for r in read_metrics(run_dir / "metrics.jsonl") if "reward/mean" in r]
    return {"report": report, "metrics": metrics, "cut_at": cut_at, "log": logs}


def _check_counted_once(result: dict[str, Any], steps: int) -> list[dict[str, Any]]:
    """Every rollout succeeded once, its reward recorded by that attempt alone."""
    rollouts = result["report"]["rollouts"]
    assert len(rollouts) == steps * TASKS * GROUP
    for rollout in rollouts:
        assert rollout["status"] == "succeeded", rollout
        done = [a for a in rollout["attempts"] if a["status"] == "succeeded"]
        assert len(done) == 1, rollout
        assert done[0]["reward_spans"] == 1, rollout
    assert len(result["metrics"]) == steps
    for step in result["metrics"]:  # the trainer used each rollout once
        assert step["transitions"] == TASKS * GROUP, step
    return [a for r in rollouts for a in r["attempts"]]


def test_training_across_hosts_survives_a_runner_host_cut_off(
    fabric: Fabric, postgres: str, tmp_path: Path
) -> None:
    # A clean two-step run before this one (both hosts ran rollouts, every attempt succeeded)
    # was dropped on 2026-12-02 for CI time: the cut run checks the same and more.
    # 16 steps: the reward takes off at step 6 to 8 in most runs, but it can creep (0.13 -> 0.30
    # after 12 steps in one CI run, 0.15 -> 0.52 in one of three runs here).
    steps = 16
    cut = _train(fabric, tmp_path, postgres, steps=steps)
    attempts = _check_counted_once(cut, steps=steps)
    workers = {a["worker_id"] for a in attempts}
    assert {"r1", "r2"} <= workers, workers  # the runner hosts ran rollouts
    lost = [a for a in attempts if a["status"] == "lost"]
    assert lost, "the cut-off host's attempts were not found lost"
    assert {a["worker_id"] for a in lost} == {"r1"}
    by_rollout = {r["rollout_id"]: r["attempts"] for r in cut["report"]["rollouts"]}
    retried = 0
    for tries in by_rollout.values():
        if any(a["status"] == "lost" for a in tries):
            (winner,) = [a for a in tries if a["status"] == "succeeded"]
            assert winner["worker_id"] != "r1" and winner["number"] > 1, tries
            assert winner["started_at"] >= cut["cut_at"], tries
            retried += 1
    detect = [a["ended_at"] - cut["cut_at"] for a in lost]
    # Lost means no heartbeat for the rollout's timeout: never sooner (measured from the
    # attempt's last recorded beat, not from the cut, as a beat can come late on a loaded
    # machine), and soon after the cut.
    silent = [a["ended_at"] - a["last_heartbeat_at"] for a in lost]
    assert min(silent) >= HEARTBEAT_TIMEOUT_S - 0.05, silent
    assert max(detect) <= HEARTBEAT_TIMEOUT_S + 10.0
    rewards = [m["reward/mean"] for m in cut["metrics"]]
    print(json.dumps({
        "multihost_time_to_detect_s": [round(min(detect), 2), round(max(detect), 2)],
        "multihost_lost_attempts": len(lost),
        "multihost_retried_attempts": retried,
        "multihost_reward_by_step": [round(r, 3) for r in rewards],
    }))  # fmt: skip
    # A step's mean over 32 rollouts moves by about 0.03 from sampling alone: a rise of 0.15
    # from the first three steps to the last two is learning, not luck.
    assert sum(rewards[-2:]) / 2 > sum(rewards[:3]) / 3 + 0.15, rewards
