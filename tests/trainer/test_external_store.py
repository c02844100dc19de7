"""``fulmen train`` against a store started with ``--token``: gateway, runner and trainer all
reach it with the token, end to end (real store service, real engine with the tiny model)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fulmen.errors import Unauthorized
from fulmen.store import open_store
from fulmen.store.reading import read_llm_calls
from fulmen.trainer.metrics import read_metrics
from fulmen.types import RolloutQuery, RolloutStatus
from tests.store.http_server import ServerProcess

pytest.importorskip("torch")
pytest.importorskip("openai")

REPO = Path(__file__).resolve().parents[2]
TOKEN = "train-secret"


@pytest.mark.slow
async def test_train_with_a_token_protected_store(tmp_path: Path) -> None:
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'shared.db'}", tmp_path / "store.log", token=TOKEN
    )
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}
        env["FULMEN_STORE_TOKEN"] = TOKEN  # the token from the environment; the URL by flag
        result = subprocess.run(
            [sys.executable, "-m", "fulmen", "train", str(REPO / "examples/toy/config.yaml"),
             "--store", server.url, "--set", f"run_dir={tmp_path / 'run'}",
             "--set", "algorithm.steps=2", "--set", "algorithm.tasks_per_step=2",
             "--set", "algorithm.group_size=2", "--set", "validation=null",
             "--set", "data.val=null", "--set", "rollouts.concurrency=4"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "done: 2 steps" in result.stdout
        steps = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "step" in r]
        assert len(steps) >= 2
        assert not (tmp_path / "run" / "store.db").exists()  # the external store was used
        with pytest.raises(Unauthorized):
            async with open_store(server.url) as anonymous:
                await anonymous.query_rollouts(RolloutQuery())
        async with open_store(server.url, token=TOKEN) as store:
            done = (await store.query_rollouts(RolloutQuery(limit=100))).items
            succeeded = [r for r in done if r.status is RolloutStatus.SUCCEEDED]
            assert len(succeeded) >= 4  # at least 2 steps x 2 tasks x 2 rollouts
            for rollout in succeeded:  # the gateway recorded every call through the token
                (call,) = await read_llm_calls(store, rollout.rollout_id)
                assert call.prompt_token_ids and call.choices[0].token_ids
    finally:
        server.stop()
