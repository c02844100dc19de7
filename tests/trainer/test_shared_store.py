"""Two runs against one store (``store_url``): rollout ids carry each run's id, so the second
run never gets the first one's finished rollouts back from the store's idempotent enqueue, and
a restarted run cancels only the rollouts it left behind itself (real SQLite file, real
built-in engine with the ``tiny`` model)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fulmen.store import open_store
from fulmen.store.reading import iter_rollouts
from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer
from fulmen.types import Mode, RolloutConfig, RolloutCreate, RolloutQuery, RolloutStatus
from tests.algorithms.sft.test_sft_train import example_imports_restored

pytest.importorskip("torch")
pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures(example_imports_restored.__name__)

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"


def fit(run_dir: Path, store_url: str, steps: int) -> list[dict[str, object]]:
    config = load_config(
        TOY,
        overrides=[
            f"run_dir={run_dir}",
            f"store_url={store_url}",
            f"algorithm.steps={steps}",
            "algorithm.tasks_per_step=2",
            "algorithm.group_size=2",
            "validation.max_tasks=2",
        ],
    )
    Trainer(config).fit()
    return read_metrics(run_dir / "metrics.jsonl")


def run_id(run_dir: Path) -> str:
    return str(json.loads((run_dir / "state.json").read_text())["run_id"])


async def rollouts(store_url: str) -> dict[str, RolloutStatus]:
    async with open_store(store_url, watchdog_interval=None) as store:
        return {r.rollout_id: r.status async for r in iter_rollouts(store, RolloutQuery())}


async def leave_unfinished(store_url: str, rollout_ids: list[str]) -> None:
    """Rollouts a killed run (or another live run) left running: claimed, never finished."""
    async with open_store(store_url, watchdog_interval=None) as store:
        config = RolloutConfig(heartbeat_timeout_s=3600.0, timeout_s=3600.0)
        await store.enqueue(
            [
                RolloutCreate(input={}, mode=Mode.TRAIN, rollout_id=i, config=config)
                for i in rollout_ids
            ]
        )
        for _ in rollout_ids:
            await store.claim("someone-else")


@pytest.mark.slow
def test_two_runs_on_one_store_keep_their_own_rollouts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first, second = tmp_path / "first", tmp_path / "second"
    fit(first, url, steps=1)
    after_first = asyncio.run(rollouts(url))
    fit(second, url, steps=1)
    after_second = asyncio.run(rollouts(url))
    a, b = run_id(first), run_id(second)
    assert a != b
    mine = {i for i in after_second if i.startswith(f"{b}-")}
    # the second run ran every rollout of its own: 2 validations x 2 tasks + 2 tasks x 2
    assert len(mine) == 8 and not mine & set(after_first)
    assert set(after_second) == set(after_first) | mine
    assert {i.split("-val")[0] for i in mine if "-val" in i} == {f"{b}-g1"}

    # A restart of the first run cancels what its own killed start left running, and leaves
    # alone what another run still runs in the same store.
    leftover, foreign = f"{a}-g1-s9-t0-r0", f"{b}-g1-s9-t0-r0"
    asyncio.run(leave_unfinished(url, [leftover, foreign]))
    records = fit(first, url, steps=2)
    status = asyncio.run(rollouts(url))
    assert status[leftover] is RolloutStatus.CANCELLED
    assert status[foreign] is RolloutStatus.RUNNING
    assert run_id(first) == a  # the restart kept its id and ran step 2 under it
    assert any(i.startswith(f"{a}-g2-s1-") for i in status)
    assert [r["step"] for r in records if "reward/mean" in r] == [1, 2]
