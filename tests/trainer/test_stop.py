"""``fulmen train`` stopped by SIGINT during an update stops there, keeps the last finished step,
and the same command resumes it.

The agent sends ~3,000-token prompts to the ``tiny`` model. The first step's two rollouts score
the same (no update); the second step's differ, and its update runs 20 epochs over sequences
longer than the micro-batch budget: many seconds of work. SIGINT arrives as soon as the update
says it started. The run must stop inside the update (it says so) without waiting for the rest,
print how to resume, and keep step 1's checkpoint; the same command then runs step 2 again (the
agent's counter restarts with the process, so this time step 2 has no update) and finishes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

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


def _command(config: Path) -> list[str]:
    return [sys.executable, "-m", "fulmen", "train", str(config), "--no-dashboard"]


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
