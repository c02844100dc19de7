"""``reward: {judge: ...}`` in a real training run: every rollout the trainer runs is judged.

The toy example trains one step on the tiny model with a rubric whose judge is a scripted
OpenAI-compatible server in its own process (it answers every call with a goal score of 7 out
of 10): the step's rewards are the judge's, not the toy agent's own, and the judge's calls are
stored under the agent name ``judge``.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fulmen.trainer.config import load_config
from fulmen.trainer.trainer import Trainer
from tests.gateway.scripted_upstream import free_socket

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def test_a_training_step_is_rewarded_by_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = free_socket()  # bound here and passed on: its port cannot be taken meanwhile
    port = held.getsockname()[1]
    answer = json.dumps({"scores": {"goal": 7}})
    judge = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/gateway/scripted_upstream.py"),
         "--fd", str(held.fileno()), "--mode", "hosted", "--content", answer],
        pass_fds=[held.fileno()],
    )  # fmt: skip
    held.close()
    try:
        for _ in range(200):
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        monkeypatch.setenv("JUDGE_KEY", "judge-secret")
        rubric = (
            f"{{judge: {{base_url: 'http://127.0.0.1:{port}/v1', model: judge-model, "
            "api_key_env: JUDGE_KEY}, criteria: [{name: goal, question: 'Is it right?'}]}"
        )
        config = load_config(
            ROOT / "examples/toy/config.yaml",
            overrides=[
                f"run_dir={tmp_path / 'run'}",
                "algorithm.steps=1",
                "algorithm.tasks_per_step=2",
                "algorithm.group_size=2",
                "validation=null",
                "data.val=null",
                f"reward={rubric}",
            ],
        )
        history = Trainer(config).fit()
    finally:
        judge.terminate()
        judge.wait(timeout=20)
    assert history[0]["reward/mean"] == pytest.approx(0.7)  # the judge's, for every rollout
    # The judge's calls: stored outside any rollout (the store's API reads calls by rollout).
    with sqlite3.connect(config.run_dir / "store.db") as db:
        bodies = db.execute("SELECT body FROM fulmen_llm_calls WHERE rollout_id IS NULL").fetchall()
    agents = [json.loads(body)["agent_name"] for (body,) in bodies]
    assert agents == ["judge"] * 4  # one rubric call per rollout
