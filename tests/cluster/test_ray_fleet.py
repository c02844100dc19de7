"""``fulmen train`` with ``cluster: {backend: ray}``, and ``fulmen runner --ray N``, on a local
three-node Ray cluster.

The test starts a head and two worker nodes on this machine, then trains the toy example with
the store service, 2 runners and 2 engine replicas as Ray actors. Mid-run it SIGKILLs the
Ray worker process of one runner actor: Ray restarts the actor, the store's watchdog finds the
dead runner's attempts lost and they are retried by the other runners. Checked: the reward
rises; every rollout succeeded exactly once with one reward; each step trained on each of its
rollouts once; both replicas served calls and, within each step, every call was served by the
step's adapter (every replica had it before the step's rollouts started). Prints the time to
replace the killed runner and the counts of lost and retried attempts.

``fulmen runner --ray 2`` runs a no-op agent's rollouts from a token-protected store service
until SIGTERM stops it, then prints the runners' summed counts and leaves no runner behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fulmen.store import open_store
from fulmen.trainer.metrics import read_metrics
from fulmen.types import RolloutQuery

pytest.importorskip("ray")
pytest.importorskip("torch")
pytest.importorskip("openai")
pytestmark = pytest.mark.slow

from tests.cluster.local_ray import LocalRayCluster  # noqa: E402
from tests.store.http_server import ServerProcess  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "examples" / "toy"
STEPS, TASKS, GROUP = 16, 4, 8
NAMESPACE = f"fulmen-test-{os.getpid()}"
HEARTBEAT_TIMEOUT_S = 12.0  # rollouts.heartbeat_timeout_s: runner actors beat every 2 s


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalRayCluster]:
    cluster = LocalRayCluster(workers=2, cpus=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _runner_children(name: str) -> dict[int, int]:
    """``{pid: parent pid}`` of the ``fulmen runner`` processes of actor ``name``."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if b"runner" in argv and any(a.startswith(f"{name}-".encode()) for a in argv):
            found[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return found


def _running_attempt_of(db: Path, worker_prefix: str) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute(
                "SELECT 1 FROM fulmen_attempts WHERE status = 'running' AND worker_id LIKE ?",
                (f"{worker_prefix}-%",),
            ).fetchone()
    except sqlite3.Error:
        return False
    return row is not None


def _kill_runner_mid_run(run_dir: Path, trainer: subprocess.Popen[bytes]) -> dict[str, Any]:
    """After the first step, SIGKILL runner 0's actor process while it runs an attempt."""
    name = f"{NAMESPACE}-runner-0"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert trainer.poll() is None, "the trainer stopped before the runner could be killed"
        metrics = run_dir / "metrics.jsonl"
        stepped = metrics.exists() and '"reward/mean"' in metrics.read_text()
        children = _runner_children(name)
        if stepped and children and _running_attempt_of(run_dir / "store.db", name):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("runner 0 never ran an attempt after the first step")
    ((child, actor_pid),) = children.items()
    killed_at = time.time()
    os.kill(actor_pid, signal.SIGKILL)  # the Ray worker process of the actor, not the runner
    while time.monotonic() < deadline:
        fresh = {pid: parent for pid, parent in _runner_children(name).items() if pid != child}
        if fresh:
            return {"killed_at": killed_at, "respawned_at": time.time(), "old_pid": actor_pid}
        time.sleep(0.05)
    raise AssertionError("runner 0 was not replaced")


async def _report(db: Path) -> list[dict[str, Any]]:
    """Rollouts with their attempts and each attempt's reward spans."""
    out: list[dict[str, Any]] = []
    async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
        for rollout in (await store.query_rollouts(RolloutQuery(limit=10_000))).items:
            spans = (await store.query_spans(rollout.rollout_id, limit=1000)).items
            rewards = Counter(s.attempt_id for s in spans if s.name == "fulmen.reward")
            calls = (await store.query_llm_calls(rollout.rollout_id, limit=100)).items
            out.append({
                "rollout_id": rollout.rollout_id,
                "status": rollout.status.value,
                "attempts": [
                    {"attempt_id": a.attempt_id, "number": a.number, "worker_id": a.worker_id,
                     "status": a.status.value, "started_at": a.started_at.timestamp(),
                     "ended_at": a.ended_at.timestamp() if a.ended_at else None,
                     "last_heartbeat_at": a.last_heartbeat_at.timestamp(),
                     "rewards": rewards[a.attempt_id]}
                    for a in await store.list_attempts(rollout.rollout_id)
                ],
                "calls": [
                    {"attempt_id": c.attempt_id, "upstream": c.upstream, "model": c.model,
                     "policy_version": c.policy_version}
                    for c in calls
                ],
            })  # fmt: skip
    return out


def test_toy_training_on_ray_learns_and_survives_a_killed_runner(
    ray_cluster: LocalRayCluster, tmp_path: Path
) -> None:
    started = time.monotonic()
    run_dir = tmp_path / "run"
    cluster = (
        f"{{backend: ray, address: '{ray_cluster.address}', namespace: {NAMESPACE}, "
        "runners: 2, engine_replicas: 2, runner_cpus: 1, engine_cpus: 1, store_cpus: 0.5}"
    )
    log = tmp_path / "train.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}
    with log.open("wb") as out:
        trainer = subprocess.Popen(
            [sys.executable, "-m", "fulmen", "train", str(TOY / "config.yaml"),
             "--set", f"run_dir={run_dir}", "--set", f"algorithm.steps={STEPS}",
             "--set", f"algorithm.tasks_per_step={TASKS}", "--set", f"algorithm.group_size={GROUP}",
             "--set", "validation=null", "--set", "data.val=null",
             "--set", "rollouts.concurrency=4",
             "--set", f"rollouts.heartbeat_timeout_s={HEARTBEAT_TIMEOUT_S}",
             # As in tests/multihost: the reward takes off within 16 steps at this rate.
             "--set", "algorithm.grpo.learning_rate=0.05",
             "--set", f"cluster={cluster}"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
            start_new_session=True,
        )  # fmt: skip
    try:
        kill = _kill_runner_mid_run(run_dir, trainer)
        trainer.wait(timeout=420)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
            trainer.wait()
    assert trainer.returncode == 0, log.read_text()[-5000:]
    wall_s = time.monotonic() - started
    # Placed as actors over the nodes: "NAME ready on node ID at IP".
    placed = dict(re.findall(rf"({NAMESPACE}-[a-z]+-?\d*) ready on node (\w+)", log.read_text()))
    assert sorted(placed) == sorted(
        [f"{NAMESPACE}-store"]
        + [f"{NAMESPACE}-{kind}-{i}" for kind in ("engine", "runner") for i in (0, 1)]
    ), placed
    assert len(set(placed.values())) >= 2, placed  # spread over more than one node

    rollouts = asyncio.run(_report(run_dir / "store.db"))
    metrics = [r for r in read_metrics(run_dir / "metrics.jsonl") if "reward/mean" in r]
    # Each rollout succeeded exactly once, its reward recorded by that attempt alone.
    assert len(rollouts) == STEPS * TASKS * GROUP
    for rollout in rollouts:
        assert rollout["status"] == "succeeded", rollout
        (won,) = [a for a in rollout["attempts"] if a["status"] == "succeeded"]
        assert won["rewards"] == 1, rollout
    assert len(metrics) == STEPS
    for step in metrics:  # the trainer used each of the step's rollouts once
        assert step["transitions"] == TASKS * GROUP, step

    # The killed runner's attempts were found lost and retried by a live runner.
    attempts = [a for r in rollouts for a in r["attempts"]]
    lost = [a for a in attempts if a["status"] == "lost"]
    assert lost, "the killed runner's attempts were not found lost"
    dead_worker = f"{NAMESPACE}-runner-0-{kill['old_pid']}"
    assert {a["worker_id"] for a in lost} == {dead_worker}
    retried = 0
    for rollout in rollouts:
        if any(a["status"] == "lost" for a in rollout["attempts"]):
            (won,) = [a for a in rollout["attempts"] if a["status"] == "succeeded"]
            assert won["worker_id"] != dead_worker and won["number"] > 1, rollout
            retried += 1
    # The replacement runner (same actor, new process) ran rollouts after the kill.
    replacement = [
        a for a in attempts
        if a["worker_id"].startswith(f"{NAMESPACE}-runner-0-") and a["worker_id"] != dead_worker
    ]  # fmt: skip
    assert replacement, "the restarted runner never ran a rollout"
    first_claim_s = min(a["started_at"] for a in replacement) - kill["killed_at"]
    detect = [a["ended_at"] - kill["killed_at"] for a in lost]
    # Lost means no heartbeat for the timeout, never sooner: measured from the attempt's last
    # recorded beat, not from the kill, as a beat can come late on a loaded machine.
    silent = [a["ended_at"] - a["last_heartbeat_at"] for a in lost]
    assert min(silent) >= HEARTBEAT_TIMEOUT_S - 0.05, silent

    # Both replicas served; within a step every call used that step's adapter at one version.
    calls = [c for r in rollouts for c in r["calls"]]
    assert len({c["upstream"] for c in calls}) == 2, Counter(c["upstream"] for c in calls)
    by_step: dict[str, set[tuple[str, str]]] = defaultdict(set)
    upstreams_by_step: dict[str, set[str]] = defaultdict(set)
    for rollout in rollouts:
        step = rollout["rollout_id"].split("-")[2]  # RUN-gN-sK-tI-rJ: step K
        for c in rollout["calls"]:
            by_step[step].add((c["model"], c["policy_version"]))
            upstreams_by_step[step].add(c["upstream"])
    assert len(by_step) == STEPS
    for step, served in by_step.items():
        assert len(served) == 1, (step, served)
    assert sum(len(u) == 2 for u in upstreams_by_step.values()) >= STEPS - 2

    rewards = [m["reward/mean"] for m in metrics]
    print(json.dumps({
        "ray_test_wall_s": round(wall_s, 1),
        "ray_runner_respawn_s": round(kill["respawned_at"] - kill["killed_at"], 2),
        "ray_runner_first_claim_after_kill_s": round(first_claim_s, 2),
        "ray_time_to_detect_lost_s": [round(min(detect), 2), round(max(detect), 2)],
        "ray_lost_attempts": len(lost),
        "ray_retried_attempts": retried,
        "ray_calls_per_replica": sorted(Counter(c["upstream"] for c in calls).values()),
        "ray_nodes_used": len(set(placed.values())),
        "ray_reward_by_step": [round(r, 3) for r in rewards],
    }))  # fmt: skip
    # As in tests/multihost: a rise of 0.15 is learning (sampling alone moves a step's mean by
    # about 0.03); the reward can creep for most of 12 steps before it takes off.
    assert sum(rewards[-2:]) / 2 > sum(rewards[:3]) / 3 + 0.15, rewards


NOOP_AGENT = """
import fulmen

@fulmen.rollout
async def noop(task):
    return 1.0
"""


def _wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_runner_ray_runs_rollouts_from_a_store_and_stops_on_sigterm(
    ray_cluster: LocalRayCluster, tmp_path: Path
) -> None:
    (tmp_path / "noop_agent.py").write_text(NOOP_AGENT)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}"}) + "\n" for i in range(40)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}
    env["FULMEN_STORE_TOKEN"] = TOKEN = "ray-runner-secret"
    fulmen = [sys.executable, "-m", "fulmen"]
    # On a port the service picks itself (ServerProcess: --port 0, the URL from its log): a
    # port picked here could be taken by another test's server before the service binds it.
    store = ServerProcess(str(tmp_path / "s.db"), tmp_path / "store.log", token=TOKEN)
    store_url = store.url
    runners: subprocess.Popen[bytes] | None = None
    try:
        enqueue = [*fulmen, "rollouts", "enqueue", "--store", store_url, "--tasks", str(tasks)]
        subprocess.run(enqueue, env=env, capture_output=True, check=True)
        with (tmp_path / "runners.log").open("wb") as err:
            runners = subprocess.Popen(
                [*fulmen, "runner", "--ray", "2", "--ray-address", ray_cluster.address,
                 "--store", store_url, "--agent", "noop_agent:noop", "--concurrency", "4",
                 "--worker-id", "rr"],
                stdout=subprocess.PIPE, stderr=err, env=env, cwd=tmp_path,
            )  # fmt: skip
        stats = [*fulmen, "store", "stats", "--store", store_url, "--json"]

        def all_done() -> bool:
            out = subprocess.run(stats, env=env, capture_output=True, text=True).stdout
            return bool(out) and json.loads(out)["rollouts"]["succeeded"] == 40

        _wait_until(all_done, 120, (tmp_path / "runners.log").read_text()[-3000:])
        assert _runner_children("rr"), "no runner processes while the rollouts ran"
        runners.send_signal(signal.SIGTERM)
        out, _ = runners.communicate(timeout=90)
        assert runners.returncode == 0, (tmp_path / "runners.log").read_text()[-3000:]
    finally:
        if runners is not None and runners.poll() is None:
            runners.kill()
            runners.wait()
        store.stop()
    summary = json.loads(out.decode().strip().splitlines()[-1])
    assert summary["runners"] == 2 and summary["restarts"] == 0, summary
    assert summary["claimed"] == summary["succeeded"] == 40, summary
    assert {w["worker_id"].rsplit("-", 1)[0] for w in summary["workers"]} == {"rr-0", "rr-1"}
    _wait_until(lambda: not _runner_children("rr"), 30, "runner processes left behind")
