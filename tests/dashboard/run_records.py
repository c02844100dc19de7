"""Runs whose comparison and diagnosis are known by construction, written through a store's API.

``fill_runs(store)`` records, in order of start:

* ``ra``: learning rate 1e-5; 3 steps whose rollouts take 9 s of every 10.1 s (a diagnosis
  that names rollouts as the bottleneck); final validation ``[0, 0, 1, 0, failed]`` (0.25 over
  4 tasks);
* ``rb``: learning rate 1e-4 and a config value holding markup (``MARKUP``); 3 steps whose
  update takes 9 s of 10.1 s; final validation ``[1, 1, 1, 0, 1]`` (0.8 over 5 tasks), so
  ``rb - ra`` on the 4 tasks both scored is +0.5;
* ``rc``: ``ra``'s config with another seed, steps and no validation at all;
* ``live``: a running run with no metrics yet (the tests add them while the page is open).
"""

from __future__ import annotations

from typing import Any

from fulmen.store import Store
from fulmen.types import AttemptStatus, Mode, RewardCreate, RolloutCreate, Run, RunMetrics

MARKUP = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
BASE = {
    "model": "tiny",
    "run_dir": "/runs/a",
    "seed": 0,
    "algorithm": {"grpo": {"learning_rate": 1e-5}},
}
RUNS = {
    "ra": BASE,
    "rb": {
        **BASE,
        "run_dir": "/runs/b",
        "algorithm": {"grpo": {"learning_rate": 1e-4}},
        "agent_note": MARKUP,
    },
    "rc": {**BASE, "run_dir": "/runs/c", "seed": 7},
}
FINAL = {"ra": [0.0, 0.0, 1.0, 0.0, None], "rb": [1.0, 1.0, 1.0, 0.0, 1.0], "rc": []}
SPLIT = {"ra": (9.0, 1.0), "rb": (1.0, 9.0), "rc": (4.0, 4.0)}


def step_values(rollout: float, train: float, sync: float = 0.1) -> dict[str, float]:
    """One training step's timings, as the trainer logs them."""
    return {
        "time/step_s": rollout + train + sync,
        "time/rollout_s": rollout,
        "time/train_s": train,
        "time/sync_s": sync,
        "updated": 1.0,
        "reward/mean": 0.5,
    }


async def _validate(store: Store, run_id: str, tag: str, rewards: list[float | None]) -> None:
    """One validation of ``run_id``: a rollout per task, named as ``fulmen train`` names them."""
    for i, reward in enumerate(rewards):
        rid = f"{run_id}-g1-{tag}-t{i}"
        await store.enqueue(
            [RolloutCreate(input={}, mode=Mode.VAL, task_id=f"v{i}", rollout_id=rid)]
        )
        (claim,) = await store.claim("w")
        if reward is None:
            await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.FAILED)
            continue
        await store.add_reward(RewardCreate(rollout_id=rid, values={"reward": reward}))
        await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)


async def fill_runs(store: Store) -> None:
    """Record ``ra``, ``rb``, ``rc`` and ``live`` (see the module docstring)."""
    from fulmen.types import RunStatus

    for n, (run_id, config) in enumerate(RUNS.items()):
        await store.start_run(Run(run_id=run_id, name=f"run-{run_id}", config=config,
                                  started_at=1000.0 + n))  # fmt: skip
        rollout, train = SPLIT[run_id]
        records: list[RunMetrics] = [
            RunMetrics(run_id=run_id, step=i, time=float(i), values=step_values(rollout, train))
            for i in (1, 2, 3)
        ]
        final = [r for r in FINAL[run_id] if r is not None]
        if final:  # the validation before training (all 0) and the final one, as logged
            await _validate(store, run_id, "val0", [0.0 for _ in FINAL[run_id]])
            await _validate(store, run_id, "val3", FINAL[run_id])
            mean = sum(final) / len(final)
            records += [
                RunMetrics(run_id=run_id, step=0, time=0.5, values={"val/reward_mean": 0.0}),
                RunMetrics(run_id=run_id, step=3, time=3.5, values={"val/reward_mean": mean}),
            ]
        await store.add_run_metrics(records)
        await store.update_run(run_id, status=RunStatus.SUCCEEDED, ended_at=2000.0 + n)
    await store.start_run(Run(run_id="live", name="run-live", config=BASE, started_at=1100.0))


async def add_live_steps(store: Store, steps: range, values: dict[str, Any]) -> None:
    """Log training steps ``steps`` of the running run ``live``."""
    await store.add_run_metrics(
        [RunMetrics(run_id="live", step=i, time=float(i), values=values) for i in steps]
    )
