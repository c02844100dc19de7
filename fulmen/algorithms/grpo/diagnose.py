"""Why a training step made no update, in one sentence a person can act on.

GRPO skips the optimizer step when nothing in the batch carries a learning signal. The step's
flat metrics (``fulmen.algorithms.grpo.loop``) hold every count needed to say which cause it was, so
the console can say it instead of leaving ``updated: 0`` in ``metrics.jsonl`` unexplained.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["no_update_reason"]


def _count(metrics: Mapping[str, float], key: str) -> int:
    value = metrics.get(key, 0.0)
    return int(value) if value == value else 0  # NaN counts as 0


def no_update_reason(metrics: Mapping[str, float], *, store_url: str = "STORE_URL") -> str:
    """Explain, from a step's metrics, why the step took no optimizer step.

    ``store_url`` is the run's store, for the commands the explanation suggests.

    A step skipped for a non-finite gradient says so first. Then the causes are checked from
    the earliest stage of the pipeline to the last: failed
    rollouts, calls no transition could be built from, transitions GRPO dropped, then groups whose
    rollouts all scored the same (every advantage zero), the most common cause.
    """
    if _count(metrics, "skipped_nonfinite"):
        # A stored record leaves a non-finite value out: it reads back as missing, not as NaN.
        norm = metrics.get("grad_norm")
        shown = f" ({norm})" if norm is not None else ""
        return (
            f"the gradient norm was not finite{shown}, so the optimizer "
            "step was skipped and the weights are unchanged; a reward, credit or loss term was "
            "not finite (check the agent's rewards and grpo.learning_rate)"
        )
    finished = _count(metrics, "rollouts/finished")
    failed = _count(metrics, "rollouts/failed")
    if finished and failed == finished:
        return (
            f"all {finished} rollouts failed; see their errors with "
            f"`fulmen rollouts list --status failed --store {store_url}`"
        )
    if _count(metrics, "transitions") == 0:
        unrouted = _count(metrics, "dropped_unrouted")
        if unrouted:
            return (
                f"{unrouted} transitions came from calls that carried no agent name "
                "(x-fulmen-agent), which the base model served and no adapter of "
                "algorithm.adapters trains; check the names with `fulmen dev`"
            )
        calls = _count(metrics, "transitions/calls")
        not_token = _count(metrics, "transitions/skipped_not_token_level")
        other_agent = _count(metrics, "transitions/skipped_agent")
        no_reward = _count(metrics, "transitions/rollouts_without_reward")
        rollouts = _count(metrics, "transitions/rollouts")
        if calls == 0 and no_reward and no_reward == rollouts:
            # A crash before the first call, not a wrong URL, is the usual cause of both.
            return (
                f"none of the {no_reward} rollouts produced a reward or called the model: a "
                "command agent that exits before its first call (`fulmen dev CONFIG` shows its "
                "exit status and stderr), or an agent that returns None without calling "
                "llm.base_url"
            )
        if calls == 0:
            return (
                "the rollouts made no LLM calls through the gateway (agents must use llm.base_url)"
            )
        if no_reward:
            return (
                f"{no_reward} rollouts emitted no reward and algorithm.transitions.missing_reward "
                "is unset; return a reward from the agent or call fulmen.emit_reward"
            )
        if other_agent == calls:
            return (
                f"none of the {calls} calls came from an agent that algorithm.transitions.agents "
                "selects; check the names with `fulmen dev`"
            )
        if not_token:
            return _untrainable_calls(
                calls, not_token, _count(metrics, "transitions/failed_calls"), store_url
            )
        return f"no transitions were built from {calls} calls"
    longest = _count(metrics, "dropped_overlong_longest")
    overlong = "longer than grpo.max_seq_len" + (f" (up to {longest} tokens)" if longest else "")
    dropped = {
        "truncated": _count(metrics, "dropped_truncated"),
        overlong: _count(metrics, "dropped_overlong"),
        "without trained tokens": _count(metrics, "dropped_untrained"),
    }
    kept = _count(metrics, "transitions") - sum(dropped.values())
    if kept <= 0:
        parts = ", ".join(f"{n} {why}" for why, n in dropped.items() if n)
        return f"every transition was dropped ({parts})"
    if _count(metrics, "skipped_zero_advantage") >= kept:
        groups = _count(metrics, "groups")
        mean = metrics.get("reward/mean", float("nan"))
        return (
            f"every rollout in each of the {groups} task groups scored the same (mean reward "
            f"{mean:.3f}), so every advantage is 0 (or within grpo.min_abs_advantage of it); "
            "more varied rewards, a larger "
            "algorithm.group_size or a higher sampling temperature give GRPO a signal"
        )
    return "no transition carried a learning signal"


def _untrainable_calls(calls: int, not_token: int, failed: int, store_url: str) -> str:
    """Why ``not_token`` of ``calls`` calls had no token ids: failed calls or the engine."""
    see = (
        "see the errors with `fulmen rollouts show ROLLOUT_ID --store "
        f"{store_url}` (a prompt longer than the model's context is a 400 naming it)"
    )
    failed = min(failed, not_token)
    if failed == not_token:
        every = "every one" if failed == calls else f"{failed}"
        return (
            f"{every} of the {calls} calls failed: the engine answered with an error instead "
            f"of a reply; {see}"
        )
    text_only = not_token - failed
    reason = f"{text_only} of {calls} calls had no token ids (not a token-level engine)"
    if failed:
        reason += f", and {failed} failed (an error instead of a reply; {see})"
    return reason
