"""One validation of a stage: the validation tasks run on what is served, scored and recorded.

``validate`` publishes the served policy with the carried resources, runs each validation task
once at ``rollouts.val_sampling``, and computes ``val/*``: the reward summary over the tasks
scored (``val/reward_mean``, ``val/success``), ``val/failed`` (rollouts that failed or gave no
reward, warned about with a listing command), each named secondary reward's mean and the time
it took. What was validated (the served weights, adapter and prompts, with each task's reward)
is added to ``RUN_DIR/validations.jsonl``, from which the end of the run picks the version it
serves (``fulmen.trainer.best``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from fulmen.algorithms.rewards import reward_metrics
from fulmen.trainer.stage_rollouts import StageRollouts
from fulmen.trainer.training_run import TrainingRun
from fulmen.types import Mode, Rollout, RolloutStatus

__all__ = ["validate"]

_log = logging.getLogger("fulmen.train")


async def validate(
    training: TrainingRun,
    rollouts: StageRollouts,
    *,
    step: int,
    stage: int,
    algorithm: str,
    log: Callable[[int, dict[str, float]], None],
) -> dict[str, float] | None:
    """Validate what ``training`` serves at stage ``stage``'s ``step``; ``log`` the metrics.

    Returns the metrics, or ``None`` when the run does not validate.
    """
    from fulmen.trainer.best import record_validation, served_now

    val_tasks = training.tasks.val
    if not val_tasks or training.config.validation is None:
        return None
    started = time.perf_counter()
    version = await rollouts.publish(metadata={"step": step})
    finished = await rollouts.run(
        list(enumerate(val_tasks)), mode=Mode.VAL, version=version, tag=f"val{step}"
    )
    # In task order (the store answers in it); None: the rollout failed or gave no reward.
    rewards = await rollouts.scored(finished)
    scored = [r for r in rewards if r is not None]
    metrics = reward_metrics("val/reward", scored, training.config.success_threshold)
    metrics["val/success"] = metrics.pop("val/reward/success")
    metrics["val/reward_mean"] = metrics.pop("val/reward/mean")
    metrics["val/failed"] = float(len(rewards) - len(scored))
    metrics = {**await _named_reward_means(rollouts, finished), **metrics}
    metrics["time/val_s"] = time.perf_counter() - started
    log(step, metrics)
    if len(scored) < len(rewards):
        failed = len(rewards) - len(scored)
        _warn_failed_validation(step, finished, failed, training.stack.store_url)
    validated = served_now(
        training,
        step=training.state.run_step(step),
        stage=stage,
        algorithm=algorithm,
        scores=metrics,
        rewards=rewards,
    )
    record_validation(training.config.run_dir, validated)
    return metrics


async def _named_reward_means(
    rollouts: StageRollouts, finished: Sequence[Rollout]
) -> dict[str, float]:
    """``val/reward/<name>``: each named secondary reward's mean over the rollouts.

    The summary's own keys (``val/reward/std``) win over a reward with such a name.
    """
    from fulmen.transitions.named_rewards import named_reward_means, secondary_rewards

    attempts = await rollouts.attempts(finished)
    values = [secondary_rewards(a.spans, a.rewards) for a in attempts]
    return named_reward_means("val/reward", values)


def _warn_failed_validation(
    step: int, finished: Sequence[Rollout], failed: int, store_url: str
) -> None:
    """Say that validation rollouts failed: they are left out of ``val/reward_mean``."""
    from fulmen.errors import error_summary

    first = next((r for r in finished if r.status is not RolloutStatus.SUCCEEDED), None)
    what = f"the first: {error_summary(first.error)}" if first and first.error else "no reward"
    # Rollouts that succeeded without a reward are not "failed": only --mode val lists them.
    listing = "--status failed --mode val" if first is not None else "--mode val"
    _log.warning(
        "validation at step %d: %d of %d rollouts failed or gave no reward (%s); they are "
        "counted in val/failed, not in val/reward_mean. `fulmen rollouts list %s --store %s` "
        "lists them (no reward shows as -)",
        step,
        failed,
        len(finished),
        what,
        listing,
        store_url,
    )
