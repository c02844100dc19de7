"""Rewards from judges and rubrics: criteria scored by a judge model or by code.

``RewardConfig`` (the ``reward:`` section of a training config) names the criteria;
``RewardJudge`` scores groups of finished rollouts on them and ``judge_rollouts`` posts the
results to a store (``docs/rewards.md``, "Judges and rubrics").
"""

from __future__ import annotations

from fulmen.rewards.config import Criterion, JudgeConfig, JudgeRetry, RewardConfig

__all__ = ["Criterion", "JudgeConfig", "JudgeRetry", "RewardConfig"]
