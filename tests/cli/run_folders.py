"""Run folders whose story is known by construction, written through the store API.

``record_run(url, ...)`` writes one run into the store at ``url`` as ``fulmen train`` records
it: its config, step metrics (``updated``, ``reward/mean``, ``loss``, ``time/step_s``), one
validation per entry of ``val`` (a rollout per task, ids ``RUN-g1-val{step}-t{i}``, a posted
reward or a failed attempt for ``None``) with its logged ``val/reward_mean``, the ``end/*``
metrics, and model versions.

``KEPT`` is a run of 4 steps (step 3 made no update) whose step-2 validation ``[1, 1, 1, 0]``
(0.75, SE 0.25) beat the final ``[1, 0, 0, failed]`` (0.25 with the failure scored 0, SE
0.25), so it ends serving model version 1 (step 2) under ``validation.keep_best``.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from fulmen.store import open_store
from fulmen.types import (
    AttemptStatus,
    Mode,
    ModelKind,
    ModelVersion,
    RewardCreate,
    RolloutCreate,
    Run,
    RunMetrics,
    RunStatus,
)

KEPT: dict[str, Any] = {
    "updated": {1: 1.0, 2: 1.0, 3: 0.0, 4: 1.0},
    "val": {0: [0.0, 0.0, 0.0, 0.0], 2: [1.0, 1.0, 1.0, 0.0], 4: [1.0, 0.0, 0.0, None]},
    "versions": [(1, 2, {"val/reward_mean": 0.75}), (2, 4, {"val/reward_mean": 1 / 3})],
    "end": {
        "end/served_step": 2.0,
        "end/served_reward_mean": 0.75,
        "end/final_reward_mean": 0.25,
        "end/kept_earlier": 1.0,
        "end/best_step": 2.0,
        "end/best_reward_mean": 0.75,
    },
}


async def _record(
    url: str,
    run_id: str,
    *,
    config: Mapping[str, Any],
    started_at: float,
    updated: Mapping[int, float],
    val: Mapping[int, Sequence[float | None]],
    versions: Sequence[tuple[int, int, Mapping[str, float]]],
    end: Mapping[str, float],
    train_reward: float,
) -> None:
    async with open_store(url, watchdog_interval=None) as store:
        await store.start_run(
            Run(run_id=run_id, name=f"run-{run_id}", config=dict(config), host="box",
                started_at=started_at)
        )  # fmt: skip
        records = [
            RunMetrics(
                run_id=run_id,
                step=step,
                time=started_at + step,
                values={
                    "updated": u,
                    "reward/mean": train_reward,
                    "loss": 0.5,
                    "time/step_s": 2.0,
                },
            )
            for step, u in updated.items()
        ]
        last_val = max(val, default=None)
        for step, rewards in val.items():
            for i, reward in enumerate(rewards):
                rid = f"{run_id}-g1-val{step}-t{i}"
                await store.enqueue(
                    [RolloutCreate(input={}, mode=Mode.VAL, task_id=f"v{i}", rollout_id=rid)]
                )
                (claim,) = await store.claim("w")
                if reward is None:
                    await store.update_attempt(
                        claim.attempt.attempt_id, status=AttemptStatus.FAILED
                    )
                    continue
                await store.add_reward(RewardCreate(rollout_id=rid, values={"reward": reward}))
                await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
            scored = [r for r in rewards if r is not None]
            values = {"val/reward_mean": statistics.fmean(scored)}
            if step == last_val:
                values.update(end)
            records.append(
                RunMetrics(run_id=run_id, step=step, time=started_at + step + 0.5, values=values)
            )
        await store.add_run_metrics(records)
        for version, step, scores in versions:
            await store.add_model_version(
                ModelVersion(
                    run_id=run_id,
                    version=version,
                    step=step,
                    kind=ModelKind.ADAPTER,
                    path=f"/runs/{run_id}/adapters/step-{step:05d}",
                    scores=dict(scores),
                )
            )
        await store.update_run(run_id, status=RunStatus.SUCCEEDED, ended_at=started_at + 300)


def record_run(
    url: str,
    run_id: str,
    *,
    config: Mapping[str, Any] | None = None,
    started_at: float = 1000.0,
    updated: Mapping[int, float] | None = None,
    val: Mapping[int, Sequence[float | None]] | None = None,
    versions: Sequence[tuple[int, int, Mapping[str, float]]] = (),
    end: Mapping[str, float] | None = None,
    train_reward: float = 0.5,
) -> None:
    """Write run ``run_id`` into the store at ``url`` (see the module docstring)."""
    asyncio.run(
        _record(
            url,
            run_id,
            config=config or {"model": "tiny", "agent": "agent:toy_agent"},
            started_at=started_at,
            updated=updated or {1: 1.0, 2: 1.0},
            val=val or {},
            versions=versions,
            end=end or {},
            train_reward=train_reward,
        )
    )
