"""Re-scoring stored rollouts with a judge and a rubric (``fulmen rescore --judge FILE``).

``load_reward_config`` reads the ``reward:`` section of a YAML file: a training config as it
is (its other sections are ignored) or a file holding that section alone.
``rescore_with_judge`` scores the rollouts a ``RescoreFilter`` selects the way the trainer
scores the rollouts it runs (``fulmen.rewards``): the ``question`` criteria on each rollout,
each ``rank`` criterion once per group, the ``check`` functions. A group is the selected
rollouts of one task that ran on one resources version in one mode, which is what one
training step's group of a task is. Unless it is a dry run, every scored rollout gets the
reward the trainer posts (``fulmen.rewards.posting``: each criterion under its name, the
weighted mean as its primary), so the rubric's score becomes its reward; a rollout the judge
could not score keeps its reward and is listed with why.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fulmen.debugging.recorded import recorded_rollout
from fulmen.debugging.rescore import (
    JudgeTally,
    RescoredRollout,
    RescoreFilter,
    RescoreResult,
    selected_rollouts,
    signal_counts,
)
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.rewards.config import RewardConfig
    from fulmen.rewards.content import JudgedRollout
    from fulmen.rewards.scoring import RewardJudge
    from fulmen.store.base import Store
    from fulmen.types import Rollout

__all__ = ["load_reward_config", "rescore_with_judge"]


def load_reward_config(path: Path) -> tuple[RewardConfig, list[Path]]:
    """Read the ``reward:`` section of the YAML file ``path``.

    Returns the section and the ``python_path`` directories the file names (relative to its
    own directory, as ``fulmen train`` reads them) followed by that directory, where ``check``
    functions are imported from. Raises ``ConfigError`` naming the file when it cannot be
    read, has no ``reward:`` or the section is invalid.
    """
    import yaml
    from pydantic import ValidationError

    from fulmen.rewards.config import RewardConfig

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the judge config {path}: {exc}") from exc
    section = raw.get("reward") if isinstance(raw, dict) else None
    if not isinstance(section, dict):
        raise ConfigError(
            f"{path} has no reward: section (a training config's, or a file holding only "
            "reward: with its judge and criteria; docs/rewards.md)"
        )
    try:
        config = RewardConfig.model_validate(section)
    except ValidationError as exc:
        problems = "; ".join(
            f"reward.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid reward section in {path}: {problems}") from exc
    base = path.parent.resolve()
    listed = raw.get("python_path") if isinstance(raw, dict) else None
    paths = [base / str(p) for p in listed] if isinstance(listed, list) else []
    return config, [*paths, base]


async def rescore_with_judge(
    store: Store,
    judge: RewardJudge,
    selection: RescoreFilter | None = None,
    *,
    is_dry_run: bool = False,
) -> RescoreResult:
    """Score the rollouts ``selection`` picks on ``judge``'s rubric; see the module docstring.

    Returns each rollout's old reward and new primary (its criteria's scores in ``scores``),
    or the error that left it unscored; ``RescoreResult.judge`` counts the judge's requests,
    cache hits and retries and the rewards posted (``None`` on a dry run, which posts
    nothing).
    """
    from fulmen.rewards.content import judged_rollout
    from fulmen.rewards.posting import post_judgements
    from fulmen.transitions.trajectory import load_attempt

    selection = selection or RescoreFilter()
    items: dict[str, RescoredRollout] = {}
    groups: dict[tuple[str, ...], list[JudgedRollout]] = {}
    async for rollout in selected_rollouts(store, selection):
        attempt = await load_attempt(store, rollout.rollout_id)
        view = recorded_rollout(rollout, attempt)
        items[rollout.rollout_id] = RescoredRollout(
            view, view.reward, None, air=signal_counts(attempt)
        )
        groups.setdefault(_group_key(rollout), []).append(judged_rollout(rollout, attempt))
    judgements = await judge.judge_groups(list(groups.values()))
    primary = judge.config.name
    for judgement in judgements:
        item = items[judgement.rollout_id]
        if judgement.values is None:
            items[judgement.rollout_id] = RescoredRollout(
                item.rollout, item.old, None, judgement.error or "unknown", item.air
            )
            continue
        scores = {k: v for k, v in judgement.values.items() if k != primary}
        items[judgement.rollout_id] = RescoredRollout(
            item.rollout, item.old, judgement.values[primary], None, item.air, scores
        )
    posted = None
    if not is_dry_run:
        posted = await post_judgements(store, judgements, primary=primary, skip_failed=True)
    counts = judge.counts
    tally = JudgeTally(
        requests=counts.requests,
        cache_hits=counts.cache_hits,
        retries=counts.retries,
        http_retries=counts.http_retries,
        posted=posted,
        primary=primary,
    )
    return RescoreResult(tuple(items.values()), {}, judge=tally)


def _group_key(rollout: Rollout) -> tuple[str, ...]:
    """Return the group a rollout is ranked in: its task, resources version and mode."""
    if rollout.task_id is None:
        return ("rollout", rollout.rollout_id)  # no task to share: a group of its own
    return ("task", rollout.task_id, str(rollout.resources_version), rollout.mode.value)
