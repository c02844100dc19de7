"""Debugging tools over stored rollouts: replay one, re-score many, A/B two prompts.

=====================  ===================================================================
``replay_rollout``     run the agent again on a rollout's task, every model reply served
                       from its recorded calls; report diverging requests and the reward
``rescore``            apply a new reward function to stored rollouts (``RecordedRollout``
                       is its input); ``write_rewards`` stores the new values by name
``run_ab``             run two prompt versions on the same tasks; paired comparison
``compare_paired``     means, paired difference with a 95% CI, t, sign and permutation tests
=====================  ===================================================================

The commands are ``fulmen replay``, ``fulmen rescore`` and ``fulmen ab`` (docs/debugging.md).
"""

from __future__ import annotations

from fulmen.debugging.ab import ABResult, format_ab, resolve_prompt, run_ab
from fulmen.debugging.divergence import Divergence
from fulmen.debugging.recorded import RecordedCall, RecordedRollout
from fulmen.debugging.replay import ReplayReport, format_replay, replay_rollout
from fulmen.debugging.rescore import (
    RescoredRollout,
    RescoreFilter,
    RescoreResult,
    load_reward_function,
    rescore,
    write_rewards,
)
from fulmen.debugging.rescore_report import format_rescore, rescore_summary
from fulmen.debugging.stats import PairedComparison, compare_paired

__all__ = [
    "ABResult",
    "Divergence",
    "PairedComparison",
    "RecordedCall",
    "RecordedRollout",
    "ReplayReport",
    "RescoreFilter",
    "RescoreResult",
    "RescoredRollout",
    "compare_paired",
    "format_ab",
    "format_rescore",
    "format_replay",
    "load_reward_function",
    "replay_rollout",
    "rescore",
    "rescore_summary",
    "resolve_prompt",
    "run_ab",
    "write_rewards",
]
