"""``RolloutScorer``: the run's judge, which scores finished groups on ``reward:`` and posts them.

With a ``reward:`` section every task's group of rollouts is judged once its rollouts finished
(``fulmen.rewards``), and the scores are posted as their rewards before the rollouts are handed
to the algorithm. The trainer builds one scorer for the run (``RunSession``) and every stage's
rollouts use it, so the judge's answers are cached once for the run (``RUN_DIR/judge-cache.jsonl``).
Each batch of groups gets its own ``RewardJudge`` (its HTTP connections and its
``judge.concurrency`` limit last as long as the batch, as a batch's rollouts do).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.rewards.cache import JudgeCache
    from fulmen.rewards.config import RewardConfig
    from fulmen.rewards.scoring import RewardJudge
    from fulmen.store import Store
    from fulmen.types import Rollout

__all__ = ["RolloutScorer"]

_log = logging.getLogger("fulmen.train")


class RolloutScorer:
    """Judges groups of finished rollouts on a rubric and posts the rewards (module docstring).

    Args:
        config: the run's ``reward:`` section.
        store: the run's store (the rollouts' records are read from it, rewards and the
            judge's call records posted to it).
        variable: the environment as the run read it (the judge's API key).
        cache_path: the file the judge's answers are kept in.
        store_url: the store as ``fulmen rollouts --store`` takes it (for the hint printed).
    """

    def __init__(
        self,
        config: RewardConfig,
        *,
        store: Store,
        variable: Callable[[str], str | None],
        cache_path: Path,
        store_url: str,
    ) -> None:
        self._config = config
        self._store = store
        self._variable = variable
        self._cache_path = cache_path
        self._store_url = store_url
        self._cache: JudgeCache | None = None

    async def score(
        self, finished: Sequence[Rollout], groups: Sequence[Sequence[str | None]]
    ) -> None:
        """Score each task's group of ``finished`` (``groups``: their ids); post the rewards.

        A rollout the judge could not score gets no reward; the first error is logged.
        """
        from fulmen.rewards.posting import judge_rollouts

        by_id = {r.rollout_id: r for r in finished}
        rollouts = [[by_id[i] for i in group if i in by_id] for group in groups]
        async with self._judge() as judge:
            judgements = await judge_rollouts(self._store, judge, rollouts)
        failed = [j for j in judgements if j.error is not None]
        if failed:
            _log.warning(
                "the judge could not score %d of %d rollouts; they get no reward (the first, "
                "%s: %s). `fulmen rollouts show ID --store %s` shows each error",
                len(failed),
                len(judgements),
                failed[0].rollout_id,
                failed[0].error,
                self._store_url,
            )

    def _judge(self) -> RewardJudge:
        """Build a ``RewardJudge`` for one batch; its answers cached in the run's file.

        The API key is read when a batch is judged, not before: a run that never judges (no
        rollout to score) does not need it.
        """
        from fulmen.rewards.cache import JudgeCache
        from fulmen.rewards.scoring import RewardJudge

        judge = self._config.judge
        api_key = None
        if judge is not None and judge.api_key_env is not None:
            api_key = self._variable(judge.api_key_env)
            if not api_key:
                raise ConfigError(
                    f"reward.judge.api_key_env names ${judge.api_key_env}, which is not set"
                )
        if self._cache is None:
            self._cache = JudgeCache(self._cache_path)
        return RewardJudge(
            self._config, api_key=api_key, cache=self._cache, record=self._store.add_llm_calls
        )
