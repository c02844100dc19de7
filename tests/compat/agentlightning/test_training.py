"""A 0.x-style agent trained end to end on the toy task as ``fulmen train`` runs it (CPU, tiny).

The run is the real stack: SQLite store, built-in engine, gateway, runner, GRPO; the agent is
named ``module:attribute`` in the config and bridged by the runner. ``agl.Trainer`` with
``agl.VERL`` is trained in ``test_zero_x_examples.py`` (the Search-R1 recipe).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import fulmen.compat.agentlightning as agl
from fulmen.store import open_store
from fulmen.tracing import semconv
from fulmen.types import RolloutQuery, RolloutStatus

pytest.importorskip("torch")

TOY = Path(__file__).resolve().parents[3] / "examples" / "toy"
TASKS = [{"id": f"t{i}", "prompt": f"Task {i}: write the letter a."} for i in range(4)]


def _trainer(tmp_path: Path, **kwargs: Any) -> agl.Trainer:
    return agl.Trainer(
        config=TOY / "config.yaml",
        overrides=[f"run_dir={tmp_path / 'run'}", "validation=null", "data.val=null"],
        **kwargs,
    )


def _spans_by_name(db: Path) -> tuple[list[Any], dict[str, list[Any]]]:
    async def read() -> tuple[list[Any], dict[str, list[Any]]]:
        async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
            page = await store.query_rollouts(RolloutQuery(statuses=[RolloutStatus.SUCCEEDED]))
            names: dict[str, list[Any]] = {}
            for rollout in page.items:
                spans = (await store.query_spans(rollout.rollout_id)).items
                for span in spans:
                    names.setdefault(span.name, []).append(span)
            return page.items, names

    return asyncio.run(read())


@pytest.mark.slow
def test_decorator_form_named_by_spec_trains_like_fulmen_train(tmp_path: Path) -> None:
    # As `fulmen train` does: the agent named "module:attribute", imported and bridged by the
    # runner; the sync function's returned number is the reward.
    trainer = _trainer(tmp_path)
    spec = "tests.compat.agentlightning.toy_agents:toy_sync_function"
    trainer.overrides += [
        f"agent={spec}",
        "algorithm.steps=1",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=4",
    ]
    config = trainer.train_config()
    from fulmen.trainer.trainer import Trainer as FulmenTrainer

    history = FulmenTrainer(config).fit(None, TASKS)
    assert len(history) == 1 and history[0]["transitions"] == 8
    rollouts, spans = _spans_by_name(config.run_dir / "store.db")
    assert len(rollouts) == 8
    sources = {r.attributes[semconv.REWARD_SOURCE] for r in spans[semconv.SPAN_REWARD]}
    assert sources == {"return"}
