"""``stages:`` on the real built-in engine with the ``tiny`` model: a stage starts from the
adapter the previous one published, validation brackets every stage in one metrics stream, and
a run killed in its second stage resumes there without repeating the first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer
from tests.algorithms.sft.test_sft_train import example_imports_restored, models_of
from tests.prefork import python

pytest.importorskip("torch")
pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures(example_imports_restored.__name__)

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"
SFT = (
    "{name: sft, rounds: %d, attempts_per_task: 4, tasks_per_round: 8, min_reward: 0.1, "
    "sft: {learning_rate: 0.01, lora: {r: 8, alpha: 16}}}"
)
GRPO = (
    "{name: grpo, steps: %d, tasks_per_step: 2, group_size: 4, "
    "grpo: {learning_rate: 0.01, lora: {r: 8, alpha: 16}}}"
)


def stages(sft_rounds: int, grpo_steps: int) -> str:
    return f"stages=[{SFT % sft_rounds}, {GRPO % grpo_steps}]"


@pytest.mark.slow
def test_second_stage_starts_from_the_adapter_the_first_published(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = load_config(
        TOY,
        overrides=[f"run_dir={run_dir}", "algorithm=null", stages(1, 2), "validation.max_tasks=4"],
    )
    Trainer(config).fit()
    records = read_metrics(run_dir / "metrics.jsonl")
    steps = [(r["step"], r["stage"], r["algorithm"], "val/reward_mean" in r) for r in records]
    assert steps == [
        (0, 0, "sft", True),  # validation before the first stage
        (1, 0, "sft", False),  # the sft round
        (1, 0, "sft", True),  # after stage 0 = before stage 1 (same prompt, same weights)
        (2, 1, "grpo", False),
        (3, 1, "grpo", False),
        (3, 1, "grpo", True),  # after stage 1
        (3, 1, "grpo", False),  # the end of the run: which version it serves (end/*)
    ]
    assert "end/served_step" in records[-1]
    # Every step of either algorithm hands freed memory back and reports what the trainer holds.
    trained = [r for r in records[:-1] if r["step"] > 0 and "val/reward_mean" not in r]
    assert len(trained) == 3 and all(r["memory/rss_gb"] > 0.1 for r in trained)
    assert all(r["memory/trimmed_gb"] >= 0 for r in trained)
    assert (run_dir / "stages" / "0-sft" / "adapters" / "round-001").is_dir()
    assert (run_dir / "stages" / "1-grpo" / "adapters" / "step-00002").is_dir()
    # GRPO's first rollouts were sampled from the sft adapter ...
    assert models_of(run_dir, "g1-st1-s0-") == {"policy-1"}
    # ... and its trainer started from the same weights: its logprobs are the engine's. A GRPO
    # trainer starting from a fresh adapter (the base model) would be off by about the nats
    # the sft round gained.
    first_grpo = next(r for r in records if r["stage"] == 1 and "logprob_gap" in r)
    sft_gain = next(r["sft/logprob_gain"] for r in records if "sft/logprob_gain" in r)
    assert sft_gain > 0.5
    assert first_grpo["logprob_gap"] < 1e-4, first_grpo
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["stage"], state["step"], state["step_offset"]) == (1, 2, 1)


def _train(run_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    command = [python(), "-m", "fulmen", "train", str(TOY)]
    for override in (f"run_dir={run_dir}", "algorithm=null", stages(2, 3), "validation=null"):
        command += ["--set", override]
    command += ["--set", "data.val=null"]
    with log.open("wb") as out:  # a file, not a pipe: nobody reads while it trains
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def _state(run_dir: Path) -> tuple[int, int]:
    path = run_dir / "state.json"
    if not path.exists():
        return (0, 0)
    state = json.loads(path.read_text())
    return int(state["stage"]), int(state["step"])


@pytest.mark.slow
def test_a_run_killed_in_its_second_stage_resumes_there(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = _train(run_dir, first_log)
    deadline = time.monotonic() + 300
    while _state(run_dir) < (1, 1):
        assert first.poll() is None, first_log.read_text()
        assert time.monotonic() < deadline, "training made no progress"
        time.sleep(0.1)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    stage, crashed_at = _state(run_dir)
    assert stage == 1 and 1 <= crashed_at < 3

    second = _train(run_dir, second_log)
    second.wait(timeout=300)
    output = second_log.read_text()
    assert second.returncode == 0, output
    assert _state(run_dir) == (1, 3)
    records = read_metrics(run_dir / "metrics.jsonl")
    # the sft stage's two rounds ran once, before the kill
    assert [r["step"] for r in records if r["stage"] == 0] == [1, 2]
    grpo = [r["step"] for r in records if r["stage"] == 1]
    # GRPO steps numbered after the sft rounds; the interrupted one ran again, none is lost
    assert sorted(set(grpo)) == [3, 4, 5]
    assert grpo[-(3 - crashed_at) :] == list(range(2 + crashed_at + 1, 6))
    assert f"done: {3 - crashed_at} steps in this run" in output
