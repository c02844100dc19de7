"""Running a config's algorithms: dispatch by name, one stage after the other, with resume.

Each stage's algorithm is looked up by name in ``fulmen.algorithms.registry``, which imports
its run function only when it runs. ``run_stages`` runs the plan
(``stages:``, or ``[algorithm]``) from where ``state.json`` says the run stopped: it serves the
weights and adapter the run had reached, cancels the rollouts a killed start of this run left
behind (never another run's in a shared store), validates before the
first stage and after every stage, and moves to the next stage with the resources and adapter
the previous one published. The validation after one stage is also the one before the next
(same resources, same weights): it is run once.
"""

from __future__ import annotations

import logging

from fulmen.algorithms.registry import algorithm
from fulmen.trainer.context import StageContext
from fulmen.trainer.training_run import TrainingRun
from fulmen.types import RolloutQuery, RolloutStatus

__all__ = ["last_stage_context", "run_stages"]

logger = logging.getLogger("fulmen.train")


async def run_stages(training: TrainingRun) -> list[dict[str, float]]:
    """Run the config's plan from the saved state; returns the metrics of every step run now."""
    plan = training.config.plan()
    state = training.state
    if state.stage > len(plan) - 1:
        state.stage = len(plan) - 1  # a finished plan: its last stage has nothing left
    state.generation += 1
    await training.policy.restore()
    await _cancel_leftovers(training)
    state.save()
    history: list[dict[str, float]] = []
    for index in range(state.stage, len(plan)):
        config = plan[index]
        context = StageContext(training, index=index, name=config.name)
        is_fresh = state.step == 0
        if is_fresh and index == 0:
            await context.progress.validate(0)
        if training.uses_stages:
            logger.info("stage %d/%d: %s", index + 1, len(plan), config.name)
        steps = await algorithm(config.name).run_function()(config, context)
        history.extend(steps)
        # also when a run killed during this validation restarts with no step left to run
        if steps or is_fresh or state.validated_step != state.step:
            await context.progress.validate(state.step)
            state.validated_step = state.step
            state.save()
        if index < len(plan) - 1:
            state.finish_stage()
    return history


def last_stage_context(training: TrainingRun) -> StageContext:
    """Return the context of the stage the run stopped in (its last one when it finished)."""
    plan = training.config.plan()
    index = min(training.state.stage, len(plan) - 1)
    return StageContext(training, index=index, name=plan[index].name)


async def _cancel_leftovers(training: TrainingRun) -> None:
    """Cancel rollouts an earlier start of this run left unfinished: their step is run again.

    Only this run's (their ids start with its id): another run sharing the store keeps its own.
    """
    from fulmen.store.reading import iter_rollouts

    unfinished = RolloutQuery(statuses=[RolloutStatus.QUEUING, RolloutStatus.RUNNING])
    store = training.stack.store
    mine = f"{training.state.run_id}-"
    # Collected first: cancelling while paging would shift the pages under the cursor.
    leftovers = [
        r.rollout_id
        async for r in iter_rollouts(store, unfinished)
        if r.rollout_id.startswith(mine)
    ]
    for rollout_id in leftovers:
        await store.update_rollout(rollout_id, status=RolloutStatus.CANCELLED)
