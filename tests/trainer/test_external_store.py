"""``fulmen train`` against a store started with ``--token``: gateway, runner and trainer all
reach it with the token, end to end (real store service, real engine with the tiny model)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import IO

import pytest

from fulmen.errors import Unauthorized
from fulmen.store import open_store
from fulmen.store.reading import read_llm_calls
from fulmen.trainer.metrics import read_metrics
from fulmen.types import RolloutQuery, RolloutStatus, RunStatus
from tests import prefork
from tests.prefork import python

pytest.importorskip("torch")
pytest.importorskip("openai")

REPO = Path(__file__).resolve().parents[2]
TOKEN = "train-secret"


@pytest.mark.slow
async def test_train_with_a_token_protected_store(tmp_path: Path) -> None:
    log = tmp_path / "store.log"
    with log.open("ab") as err:
        server = _serve(tmp_path / "shared.db", err)
    try:
        url = await _served_url(log, server)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}
        env.update(prefork.environment())
        env["FULMEN_STORE_TOKEN"] = TOKEN  # the token from the environment; the URL by flag
        result = subprocess.run(
            [python(), "-m", "fulmen", "train", str(REPO / "examples/toy/config.yaml"),
             "--store", url, "--set", f"run_dir={tmp_path / 'run'}",
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
            async with open_store(url) as anonymous:
                await anonymous.query_rollouts(RolloutQuery())
        async with open_store(url, token=TOKEN) as store:
            (run,) = (await store.list_runs()).items  # the run is recorded in the store it used
            assert f"run: {run.run_id} in the store" in result.stdout
            assert run.status is RunStatus.SUCCEEDED
            assert [v.step for v in await store.list_model_versions(run.run_id)] == [1, 2]
            done = (await store.query_rollouts(RolloutQuery(limit=100))).items
            succeeded = [r for r in done if r.status is RolloutStatus.SUCCEEDED]
            assert len(succeeded) >= 4  # at least 2 steps x 2 tasks x 2 rollouts
            for rollout in succeeded:  # the gateway recorded every call through the token
                (call,) = await read_llm_calls(store, rollout.rollout_id)
                assert call.prompt_token_ids and call.choices[0].token_ids
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(15)


def _serve(db: Path, err: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start ``fulmen store serve --token`` on a free port, its log into ``err``."""
    return subprocess.Popen(
        [python(), "-m", "fulmen", "store", "serve", "--db", str(db), "--port", "0",
         "--token", TOKEN],
        env={k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}
        | prefork.environment(),
        stdout=subprocess.DEVNULL, stderr=err,
    )  # fmt: skip


async def _served_url(log: Path, server: subprocess.Popen[bytes]) -> str:
    """Wait for ``fulmen store serve`` to log the address it listens on."""
    for _ in range(600):
        match = re.search(r"at (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
        if match:
            return match.group(1)
        assert server.poll() is None, log.read_text()
        await asyncio.sleep(0.05)
    raise AssertionError(f"the store did not start:\n{log.read_text()}")
