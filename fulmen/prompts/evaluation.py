"""Running a prompt version on tasks through the runners, and scoring it.

The rollouts go through the normal path: they are enqueued in the store pinned to a resources
version, any runner claims and runs them, and their rewards come back from the store. Rollout
ids are derived from ``id_prefix`` and the task's position, so running the same tasks again
(after a crash) finds the rollouts already there, finished or not, instead of running them
twice: the store's ``enqueue`` returns an existing rollout with the same content as it is.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fulmen.types import Mode, PromptScore, Rollout, RolloutConfig, RolloutCreate, RolloutStatus

if TYPE_CHECKING:
    from fulmen.store.base import Store

__all__ = ["RolloutOutcome", "run_tasks", "score_prompt"]


@dataclass(frozen=True)
class RolloutOutcome:
    """A finished rollout of one task and its final reward (0.0 when it failed or had none)."""

    rollout: Rollout
    task_id: str
    task: Any
    reward: float


async def run_tasks(
    store: Store,
    tasks: Sequence[tuple[str, Any]],
    *,
    version: int,
    mode: Mode,
    id_prefix: str,
    config: RolloutConfig | None = None,
    timeout_s: float = 600.0,
    on_wait: Callable[[], None] | None = None,
) -> list[RolloutOutcome]:
    """Enqueue one rollout per ``(task_id, task)`` on resources ``version`` and wait for all.

    ``on_wait`` runs every few seconds while waiting (to check that a runner is alive, say);
    ``TimeoutError`` names how many rollouts were unfinished after ``timeout_s``.
    """
    from fulmen.transitions.trajectory import load_attempt

    creates = [
        RolloutCreate(
            input=task,
            mode=mode,
            task_id=task_id,
            rollout_id=f"{id_prefix}-t{index}",
            resources_version=version,
            config=config or RolloutConfig(),
        )
        for index, (task_id, task) in enumerate(tasks)
    ]
    await store.enqueue(creates)
    ids = [c.rollout_id for c in creates if c.rollout_id is not None]
    deadline = time.monotonic() + timeout_s
    while True:
        done = await store.wait_for_rollouts(ids, timeout=5.0)
        if len(done) == len(ids):
            break
        if on_wait is not None:
            on_wait()
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{len(ids) - len(done)} of {len(ids)} rollouts ({id_prefix}-*) did not finish "
                f"in {timeout_s:.0f} s; is a runner serving this store?"
            )
    outcomes: list[RolloutOutcome] = []
    for rollout, (task_id, task) in zip(done, tasks, strict=True):
        reward = 0.0
        if rollout.status is RolloutStatus.SUCCEEDED:
            final = (await load_attempt(store, rollout.rollout_id)).final_reward
            reward = 0.0 if final is None else final
        outcomes.append(RolloutOutcome(rollout, task_id, task, reward))
    return outcomes


async def score_prompt(
    store: Store,
    version: int,
    tasks: Sequence[tuple[str, Any]],
    *,
    name: str,
    id_prefix: str,
    run_id: str | None = None,
    config: RolloutConfig | None = None,
    timeout_s: float = 600.0,
    on_wait: Callable[[], None] | None = None,
) -> PromptScore:
    """Run validation rollouts of ``tasks`` on ``version`` and return the prompt's score.

    The score is the mean final reward; ``instances`` keeps each task's reward by task id
    (rollouts that failed count 0.0). Store it with ``record_scores``.
    """
    outcomes = await run_tasks(
        store,
        tasks,
        version=version,
        mode=Mode.VAL,
        id_prefix=id_prefix,
        config=config,
        timeout_s=timeout_s,
        on_wait=on_wait,
    )
    rewards = [o.reward for o in outcomes]
    return PromptScore(
        version=version,
        name=name,
        score=statistics.fmean(rewards) if rewards else 0.0,
        instances={o.task_id: o.reward for o in outcomes},
        run_id=run_id,
    )
