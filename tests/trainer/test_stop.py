"""``fulmen train`` stopped by SIGINT during an update stops there, keeps the last finished step,
and the same command resumes it. Ctrl-C while rollouts run prints the resume line without their
connection errors, and a resume with a changed setting records it as a new config version.

The agent sends ~3,000-token prompts to the ``tiny`` model. The first step's two rollouts score
the same (no update); the second step's differ, and its update runs 20 epochs over sequences
longer than the micro-batch budget: many seconds of work. SIGINT arrives as soon as the update
says it started. The run must stop inside the update (it says so) without waiting for the rest,
print how to resume, and keep step 1's checkpoint; the same command then runs step 2 again (the
agent's counter restarts with the process, so this time step 2 has no update) and finishes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from fulmen.store import open_store
from fulmen.trainer.metrics import read_metrics
from tests.prefork import python

pytest.importorskip("torch")
pytest.importorskip("openai")

AGENT = """
import itertools
from typing import Any

from openai import AsyncOpenAI

import fulmen

_started = itertools.count(1)
_WORDS = "the a of to and in is it you that he was for on are with as his they be".split()


def tasks() -> list[dict[str, Any]]:
    return [{"id": f"t{i}", "salt": i} for i in range(4)]


@fulmen.rollout
async def long_prompt(task: dict[str, Any], llm: fulmen.LLM) -> float:
    number = next(_started)
    words = [_WORDS[(i * 7 + task["salt"]) % len(_WORDS)] for i in range(2_800)]
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    try:
        await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": " ".join(words)}]
        )
    finally:
        await client.close()
    # The first two rollouts (step 1) score the same: no update. Later ones differ.
    return 0.5 if number <= 2 else float(number % 2)
"""

CONFIG = """\
model: tiny
agent: long_prompt_agent:long_prompt
python_path: ["."]
run_dir: run
seed: 0
data: {train: "long_prompt_agent:tasks"}
rollouts:
  concurrency: 2
  timeout_s: 120
  train_sampling: {temperature: 1.0, max_tokens: 8}
validation: null
algorithm:
  steps: 2
  tasks_per_step: 1
  group_size: 2
  grpo: {epochs: 20, micro_batch_tokens: 1024, learning_rate: 0.001}
"""


TOY = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"


def _command(config: Path) -> list[str]:
    return [python(), "-m", "fulmen", "train", str(config), "--no-dashboard"]


def _wait_for(log: Path, text: str, process: subprocess.Popen[bytes], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, f"no {text!r} in {limit_s} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigint_during_an_update_stops_it_keeps_the_last_step_and_resumes(
    tmp_path: Path,
) -> None:
    (tmp_path / "long_prompt_agent.py").write_text(AGENT)
    config = tmp_path / "config.yaml"
    config.write_text(textwrap.dedent(CONFIG))
    run_dir = tmp_path / "run"
    log = tmp_path / "first.log"
    with log.open("wb") as out:
        first = subprocess.Popen(
            _command(config), cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait_for(log, "updating in", first, limit_s=300)
        first.send_signal(signal.SIGINT)
        code = first.wait(timeout=120)  # a hang bound, not a measurement
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    assert code == 128 + signal.SIGINT, output
    # It stopped inside the update (most of its 20 epochs were left), not after it.
    assert "the update stopped at a safe point" in output, output
    assert "received SIGINT: stopping at the next safe point" in output
    assert "stopped; the checkpoint of step 1 (" in output
    assert f"Resume with the same command: fulmen train {config}" in output
    assert json.loads((run_dir / "state.json").read_text())["step"] == 1
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-00001"]

    second = subprocess.run(
        _command(config), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "done: 1 steps in this run, 2 in all" in second.stdout
    assert json.loads((run_dir / "state.json").read_text())["step"] == 2


async def _text_metrics(store_db: Path) -> list[dict[str, str]]:
    async with open_store(f"sqlite:///{store_db}", watchdog_interval=None) as store:
        (run,) = (await store.list_runs()).items
        records = (await store.query_run_metrics(run.run_id)).items
    return [r.text for r in records if r.text]


@pytest.mark.slow
def test_ctrl_c_prints_only_the_resume_line_and_a_changed_setting_is_a_new_version(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    command = [
        python(), "-m", "fulmen", "train", str(TOY), "--no-dashboard",
        "--set", f"run_dir={run_dir}", "--set", "algorithm.group_size=4",
        "--set", "validation=null", "--set", "data.val=null",
    ]  # fmt: skip
    log = tmp_path / "first.log"
    with log.open("wb") as out:
        first = subprocess.Popen(
            [*command, "--set", "algorithm.steps=8"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, as a terminal's foreground job
        )
    try:
        deadline = time.monotonic() + 300
        state = run_dir / "state.json"
        while not (state.exists() and json.loads(state.read_text())["step"] >= 1):
            assert first.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "no step in 300 s"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the whole group, while step 2 rolls out
        code = first.wait(timeout=120)  # a hang bound, not a measurement
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    assert code == 128 + signal.SIGINT, output
    after = output.split("received SIGINT: stopping at the next safe point", 1)[1]
    assert "Resume with the same command: fulmen train" in after, output
    # Before: a line per abandoned rollout (retries, connection errors, gateway flushes).
    for noise in ("Traceback", "Connection error", "Retrying request", "gateway flush failed"):
        assert noise not in after, after

    steps_done = json.loads((run_dir / "state.json").read_text())["step"]
    changes = [f"algorithm.steps={steps_done + 1}", "algorithm.grpo.learning_rate=0.02"]
    second = subprocess.run(  # one more step, at another learning rate
        [*command, *(f"--set={change}" for change in changes)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 0, second.stdout + second.stderr
    line = (
        f"{run_dir}: resuming with changed settings (algorithm.grpo.learning_rate, "
        f"algorithm.steps); recorded as config version 2 from step {steps_done}"
    )
    assert line in second.stderr
    records = [r for r in read_metrics(run_dir / "metrics.jsonl") if "config/version" in r]
    assert [(r["step"], r["config/version"]) for r in records] == [(steps_done, 2)]
    changed = {"config/changed": "algorithm.grpo.learning_rate, algorithm.steps"}
    stored = asyncio.run(_text_metrics(run_dir / "store.db"))
    assert [t["config/changed"] for t in stored if "config/changed" in t] == [
        changed["config/changed"]
    ]
