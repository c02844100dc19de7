"""Runs whose comparison and diagnosis are known by construction, written through a store's API.

``fill_runs(store)`` records, in order of start:

* ``ra``: learning rate 1e-5; 3 steps whose rollouts take 9 s of every 10.1 s (a diagnosis
  that names rollouts as the bottleneck); final validation ``[0, 0, 1, 0, failed]`` (0.25 over
  4 tasks);
* ``rb``: learning rate 1e-4 and a config value holding markup (``MARKUP``); 3 steps whose
  update takes 9 s of 10.1 s; final validation ``[1, 1, 1, 0, 1]`` (0.8 over 5 tasks), so
  ``rb - ra`` on the 4 tasks both scored is +0.5;
* ``rc``: ``ra``'s config with another seed, steps and no validation at all;
* ``live``: a running run with no metrics yet (the tests add them while the page is open);
* ``rh`` (started first, so the runs page does not pick it): 6 GRPO steps whose update metrics
  are ``HEALTH``; step 2 skipped its optimizer step (a gradient norm that was not finite, so
  none is stored) and step 5 had nothing to learn (every advantage zero), so neither made an
  update; validations at steps 0, 4 and 6 (0.25, 0.75, 0.5) and an end of run that kept step 4
  (``validation.keep_best``); a model version per step (v1..v6), and markup in its config;
* ``rr`` (started before ``rh``): 2 steps of a run with roles ``solver`` and ``critic``, each
  logging its own ``ROLE/kl``, beside a ``val/kl`` that is no role's.
"""

from __future__ import annotations

from typing import Any

from fulmen.store import Store
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
#: ``rh``'s update metrics by step (``None``: not logged at that step).
HEALTH: dict[str, list[float | None]] = {
    "loss": [0.5, 0.4, 0.3, 0.2, None, 0.1],
    "kl": [0.1, 0.2, 0.3, 0.4, None, 0.6],
    "entropy": [1.2, 1.1, 1.0, 0.9, None, 0.8],
    "grad_norm": [2.0, None, 1.5, 1.0, None, 0.5],
    "clip_fraction": [0.0, 0.05, 0.1, 0.1, None, 0.2],
}
NO_UPDATE = (2, 5)
HEALTH_CONFIG = {
    "model": "tiny",
    "run_dir": "/runs/h",
    "algorithm": {"grpo": {"learning_rate": 2e-5, "kl_coef": 0.05}, "group_size": 4},
    "validation": {"keep_best": True},
    "agent_note": MARKUP,
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
    """Record ``ra``, ``rb``, ``rc``, ``live`` and ``rh`` (see the module docstring)."""
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
    await fill_health_run(store)


def health_values(step: int) -> dict[str, float]:
    """``rh``'s training step ``step`` (1..6) as the GRPO loop logs it."""
    values = {**step_values(4.0, 2.0), "reward/mean": 0.25 + 0.05 * step}
    values.update({k: v for k, by_step in HEALTH.items() if (v := by_step[step - 1]) is not None})
    counts = {"rollouts/finished": 8.0, "rollouts/failed": 0.0, "transitions": 8.0, "groups": 2.0}
    values.update(counts)
    if step == 2:  # the norm was inf: the optimizer step was skipped (and inf is not stored)
        values.update(updated=0.0, skipped_nonfinite=1.0)
    if step == 5:  # every rollout of each group scored the same
        values.update(updated=0.0, skipped_zero_advantage=8.0, **{"reward/mean": 1.0})
    return values


async def fill_health_run(store: Store) -> None:
    """Record ``rh`` (see the module docstring)."""
    await store.start_run(
        Run(run_id="rh", name="run-health", config=HEALTH_CONFIG, started_at=900.0)
    )
    validation = {0: 0.25, 4: 0.75, 6: 0.5}
    records = [
        RunMetrics(run_id="rh", step=s, time=float(s), values=health_values(s)) for s in range(1, 7)
    ]
    records += [
        RunMetrics(run_id="rh", step=s, time=s + 0.5, values={"val/reward_mean": v})
        for s, v in validation.items()
    ]
    end = {
        "end/served_step": 4.0,
        "end/served_reward_mean": 0.75,
        "end/final_reward_mean": 0.5,
        "end/kept_earlier": 1.0,
        "end/best_step": 4.0,
        "end/best_reward_mean": 0.75,
    }
    records.append(RunMetrics(run_id="rh", step=6, time=6.75, values=end))
    await store.add_run_metrics(records)
    for s in range(1, 7):
        scores = {"val/reward_mean": validation[s]} if s in validation else {}
        await store.add_model_version(
            ModelVersion(
                run_id="rh",
                version=s,
                step=s,
                kind=ModelKind.ADAPTER,
                path=f"/runs/h/adapters/step-{s:05d}",
                scores=scores,
                resources_version=10 + s,
            )
        )
    await store.update_run("rh", status=RunStatus.SUCCEEDED, ended_at=1900.0)
    await store.start_run(Run(run_id="rr", name="run-roles", config=BASE, started_at=800.0))
    await store.add_run_metrics(
        [
            RunMetrics(
                run_id="rr",
                step=s,
                time=float(s),
                values={"updated": 1.0, "solver/kl": 0.1 * s, "critic/kl": 0.2, "val/kl": 9.0},
            )
            for s in (1, 2)
        ]
    )


async def add_live_steps(store: Store, steps: range, values: dict[str, Any]) -> None:
    """Log training steps ``steps`` of the running run ``live``."""
    await store.add_run_metrics(
        [RunMetrics(run_id="live", step=i, time=float(i), values=values) for i in steps]
    )
