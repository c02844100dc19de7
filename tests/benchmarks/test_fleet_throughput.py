"""``benchmarks/fleet_throughput.py`` at its smallest size, so the benchmark cannot rot.

One ``fulmen runner`` over a SQLite store service, the no-op agent and the toy agent (through a
real gateway to the scripted upstream, no model): every rollout succeeds, every toy call is
recorded, and no process of the fleet is left running afterwards. Asserts behaviour, never
speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_MARK = "FLEET_BENCH_RUN"


def leftover_processes(mark: str) -> list[int]:
    """Pids of processes whose environment carries the benchmark run's mark."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"{RUN_MARK}={mark}".encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.slow
def test_smallest_fleet_runs_and_stops_everything(tmp_path: Path) -> None:
    workdir = tmp_path / "fleet"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "fleet_throughput.py"),
            *("--stores", "sqlite", "--agents", "noop", "toy", "--runners", "1"),
            *("--rollouts", "6", "--toy-rollouts", "4", "--llm", "scripted"),
            *("--workdir", str(workdir)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["cpu_count"] >= 1 and report["llm"] == "scripted"
    noop, toy = report["results"]
    assert (noop["agent"], noop["store"], noop["runners"]) == ("noop", "sqlite", 1)
    assert noop["backend"] == "local" and noop["workers_seen"] == 1
    assert noop["succeeded"] == noop["rollouts"] == 6 and noop["llm_calls"] == 0
    assert toy["succeeded"] == toy["rollouts"] == 4 and toy["llm_calls"] == 4
    for result in (noop, toy):
        assert result["per_runner_succeeded"] == [result["rollouts"]]
        assert result["rollouts_per_s"] > 0 and result["ratio_to_1_runner"] == 1.0
        assert result["rollouts_per_s_per_core"] * report["cpu_count"] == pytest.approx(
            result["rollouts_per_s"], rel=0.02
        )
    assert "| local | sqlite | toy | 1 | 4 |" in done.stderr  # the markdown table
    assert not leftover_processes(str(workdir))
