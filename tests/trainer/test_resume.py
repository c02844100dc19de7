"""``fulmen train`` killed with SIGKILL mid-run resumes from its last checkpoint, and its
engine does not outlive it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fulmen.trainer.metrics import read_metrics
from tests.prefork import python

pytest.importorskip("torch")
pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"


def _train(run_dir: Path, steps: int, log: Path, *, fresh: bool = False) -> subprocess.Popen[bytes]:
    """Start ``fulmen train``; ``fresh``: on a fresh interpreter, its engine too (no prefork)."""
    env = dict(os.environ)
    if fresh:  # the process tree a user has: the engine is the trainer's own child
        env.pop("FULMEN_PYTHON", None)
    command = [
        sys.executable if fresh else python(),
        "-m",
        "fulmen",
        "train",
        str(TOY),
        "--set",
        f"run_dir={run_dir}",
        "--set",
        f"algorithm.steps={steps}",
        "--set",
        "algorithm.group_size=4",
        "--set",
        "validation=null",
        "--set",
        "data.val=null",
    ]
    with log.open("wb") as out:  # a file, not a pipe: nobody reads while it trains
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def _state_step(run_dir: Path) -> int:
    path = run_dir / "state.json"
    if not path.exists():
        return 0
    return int(json.loads(path.read_text())["step"])


def _engines() -> dict[int, int]:
    """Engine processes on the machine: pid -> parent pid (zombies no longer name the module).

    ``-ww``: without it ``ps`` may cut each line at 80 columns (seen under pytest), and a
    checkout under a long path then pushes ``fulmen.cli.serve`` off the line.
    """
    out = subprocess.run(
        ["ps", "-eww", "-o", "pid,ppid,args"], capture_output=True, text=True
    ).stdout
    rows = (line.split(maxsplit=2) for line in out.splitlines()[1:])
    return {int(r[0]): int(r[1]) for r in rows if len(r) == 3 and "fulmen.cli.serve" in r[2]}


@pytest.mark.slow
def test_killed_training_resumes_from_last_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = _train(run_dir, steps=5, log=first_log, fresh=True)
    deadline = time.monotonic() + 300
    while _state_step(run_dir) < 2:
        assert first.poll() is None, first_log.read_text()
        assert time.monotonic() < deadline, "training made no progress"
        time.sleep(0.2)
    # Only this trainer's engines: other tests on the machine may run their own.
    engines = {pid for pid, parent in _engines().items() if parent == first.pid}
    assert engines, "the trainer started no engine of its own"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    crashed_at = _state_step(run_dir)
    assert 2 <= crashed_at < 5

    # The engine notices its launcher is gone and stops.
    deadline = time.monotonic() + 30
    while engines & _engines().keys():
        assert time.monotonic() < deadline, "the engine outlived the killed trainer"
        time.sleep(0.2)

    second = _train(run_dir, steps=5, log=second_log)
    second.wait(timeout=600)
    output = second_log.read_text()
    assert second.returncode == 0, output
    assert _state_step(run_dir) == 5
    steps = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if "reward/mean" in r]
    # Steps up to the checkpoint ran once; the one the crash interrupted ran again; none is lost.
    assert sorted(set(steps)) == [1, 2, 3, 4, 5]
    assert steps[-(5 - crashed_at) :] == list(range(crashed_at + 1, 6))
    assert f"done: {5 - crashed_at} steps in this run" in output


@pytest.mark.slow
def test_a_run_killed_during_its_closing_validation_validates_on_restart(tmp_path: Path) -> None:
    """The state after the last checkpoint does not yet say the closing validation finished."""
    run_dir = tmp_path / "run"
    command = [
        python(), "-m", "fulmen", "train", str(TOY), "--no-dashboard",
        "--set", f"run_dir={run_dir}", "--set", "algorithm.steps=1",
        "--set", "algorithm.group_size=2", "--set", "algorithm.tasks_per_step=2",
        "--set", "validation.max_tasks=4",
    ]  # fmt: skip

    def validated_steps() -> list[int]:
        records = read_metrics(run_dir / "metrics.jsonl")
        return [int(r["step"]) for r in records if "val/reward_mean" in r]

    for _ in range(2):
        subprocess.run(command, check=True, capture_output=True, timeout=300)
    assert validated_steps() == [0, 1]  # a finished run started again validates nothing more
    state_file = run_dir / "state.json"
    state = json.loads(state_file.read_text())
    assert state["validated_step"] == 1
    state_file.write_text(json.dumps({**state, "validated_step": None}))  # as when killed then
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    assert validated_steps() == [0, 1, 1]
    assert json.loads(state_file.read_text())["validated_step"] == 1
