"""An agent whose reward code raises: `fulmen dev` and `fulmen train` fail loudly, never look done.

Before: `dev` printed "0/2 rollouts succeeded; mean reward nan" and exited 0; `train` ran every
step, exited 0 and reported "validation reward: before 0.000 -> after 0.000" (the failed
validation rollouts scored 0), with a hint naming the placeholder RUN_DIR.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.prefork import python

pytest.importorskip("torch")
pytest.importorskip("openai")

AGENT = """
from typing import Any

import fulmen
from openai import OpenAI


def tasks() -> list[dict[str, Any]]:
    return [{"id": f"t{i}", "prompt": "Say a."} for i in range(2)]


@fulmen.rollout
def broken(task: dict[str, Any], llm: fulmen.LLM) -> float:
    client = OpenAI(base_url=llm.base_url, api_key=llm.api_key)
    client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    client.close()
    return 1.0 if task["expected"] == "a" else 0.0  # the tasks have no "expected"
"""


def project(tmp_path: Path) -> Path:
    (tmp_path / "my_agent.py").write_text(AGENT)
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            model: tiny
            agent: my_agent:broken
            run_dir: run
            python_path: ["."]
            data: {train: "my_agent:tasks", val: "my_agent:tasks"}
            rollouts:
              concurrency: 2
              timeout_s: 60
              max_attempts: 1
              train_sampling: {temperature: 1.0, max_tokens: 4}
              val_sampling: {temperature: 0.0, max_tokens: 4}
            validation: {every: 10}
            algorithm: {steps: 5, tasks_per_step: 1, group_size: 2, max_failed_steps: 2}
            """
        )
    )
    return config


def fulmen(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [python(), "-m", "fulmen", *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_dev_exits_non_zero_naming_the_exception_when_every_rollout_failed(
    tmp_path: Path,
) -> None:
    dev = fulmen(tmp_path, "dev", str(project(tmp_path)), "-n", "2")
    assert dev.returncode == 1, dev.stdout + dev.stderr[-2000:]
    assert "fulmen dev: 2 training tasks (data.train) sampled as training does" in dev.stdout
    assert '"temperature": 1.0' in dev.stdout.splitlines()[0]
    assert "0/2 rollouts succeeded" in dev.stdout
    assert "every rollout failed; the first: KeyError: 'expected'" in dev.stderr


@pytest.mark.slow
def test_train_stops_after_failed_steps_and_reports_failed_validation(tmp_path: Path) -> None:
    trained = fulmen(tmp_path, "train", str(project(tmp_path)), "--no-dashboard")
    assert trained.returncode == 1, trained.stdout + trained.stderr[-3000:]
    store = f"sqlite:///{tmp_path / 'run' / 'store.db'}"
    err = trained.stderr
    assert "every rollout of the last 2 steps (to step 2) failed" in err
    assert "the first error: KeyError: 'expected'" in err
    assert f"fulmen rollouts list --status failed --store {store}" in err
    assert "RUN_DIR" not in err
    # The validation before training: its failed rollouts are reported, not scored 0.
    assert "validation at step 0: 2 of 2 rollouts failed or gave no reward" in err
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    (val,) = [r for r in records if "val/failed" in r]
    assert val["val/failed"] == 2.0 and val["val/reward_mean"] is None  # NaN: no reward
    assert [r["step"] for r in records if "reward/mean" in r] == [1, 2]  # stopped at step 2


# A command agent that raises before its first model call: its rollouts succeed without reward.
CRASH = "import sys; print('starting', file=sys.stderr); raise RuntimeError('no API key set')"


@pytest.mark.slow
def test_train_stops_when_no_rollout_produces_a_reward_naming_the_crash(tmp_path: Path) -> None:
    from fulmen.agent.command.sandbox import interpreter_for

    # The process sandbox: bubblewrap cannot hide a run folder under pytest's owner-only /tmp.
    sandbox = {"backend": "process", "network": "host"}
    command = json.dumps({"command": [interpreter_for(61000), "-c", CRASH], "sandbox": sandbox})
    (tmp_path / "tasks.jsonl").write_text('{"id": "t0"}\n{"id": "t1"}\n')
    config = tmp_path / "config.yaml"
    config.write_text(
        f"model: tiny\nagent: {command}\nrun_dir: run\ndata: {{train: tasks.jsonl}}\n"
        "rollouts: {concurrency: 2, timeout_s: 60}\n"
        "algorithm: {steps: 5, tasks_per_step: 1, group_size: 2, max_failed_steps: 2}\n"
    )
    trained = fulmen(tmp_path, "train", str(config), "--no-dashboard")
    assert trained.returncode == 1, trained.stdout + trained.stderr[-3000:]
    store = f"sqlite:///{tmp_path / 'run' / 'store.db'}"
    err = trained.stderr
    error = err.split("fulmen: error: ", 1)[1]
    assert error.startswith(
        "no rollout of the last 2 steps (to step 2) produced a reward; the first: the command "
        "exited 1 before calling the model ("
    ), error
    assert "its stderr ended with: RuntimeError: no API key set." in error
    assert f"`fulmen rollouts list --mode train --store {store}`" in error
    assert f"`fulmen rollouts show {tmp_path.name}" not in error  # an id, not a placeholder
    assert "llm.base_url" not in err  # it blamed the URL for the crash
    # One line per step about it, none per rollout.
    no_update = [line for line in err.splitlines() if "made no update" in line]
    assert len(no_update) == 2, err[-3000:]
    assert "no rollout produced a reward; the first: the command exited 1" in no_update[0]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line) for line in lines]
    assert [(r["step"], r["rollouts/rewarded"]) for r in steps if "reward/mean" in r] == [
        (1, 0.0),
        (2, 0.0),
    ]
