"""One rollout as the dashboard shows it: attempts, spans, calls, tokens, rewards, transitions.

Everything comes from the store through transition building's own reader (``load_attempt``) and
transition builder (``AttemptRecords.trajectory``), so the tokens marked *trained* here are
exactly the tokens the trainer's loss sees with the same ``TransitionOptions``: a call's
completion tokens are trained when the call went into a transition, and in merged mode the
observation tokens between merged calls appear in the transition with ``loss_mask`` 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fulmen.errors import NotFound
from fulmen.tracing import semconv
from fulmen.transitions.air import call_signals
from fulmen.transitions.signals import read_signals
from fulmen.transitions.trajectory import AttemptRecords, TransitionOptions, load_attempt

if TYPE_CHECKING:
    from fulmen.store.base import Store
    from fulmen.types import LLMCall, Reward, Span
    from fulmen.types.transitions import Trajectory

__all__ = ["rollout_detail"]

_MAX_TOKENS_SHOWN = 4096  # per call; longer completions are cut in the token view


async def rollout_detail(
    store: Store,
    rollout_id: str,
    *,
    attempt_id: str | None = None,
    options: TransitionOptions | None = None,
) -> dict[str, Any]:
    """Return the JSON-ready view of one rollout and one of its attempts (latest by default).

    ``NotFound`` for an unknown rollout or attempt. ``options`` are the transition options
    of the run that trains on it (defaults: per-call transitions of every agent).
    """
    rollout, attempts = await asyncio.gather(
        store.get_rollout(rollout_id), store.list_attempts(rollout_id)
    )
    if attempt_id is not None and (await store.get_attempt(attempt_id)).rollout_id != rollout_id:
        raise NotFound(f"attempt {attempt_id!r} is not an attempt of rollout {rollout_id!r}")
    records = await load_attempt(store, rollout_id, attempt_id=attempt_id)
    trajectory = records.trajectory(options=options)
    return {
        "rollout": rollout.model_dump(mode="json"),
        "attempts": [a.model_dump(mode="json") for a in attempts],
        "attempt_id": records.attempt_id,
        "spans": [_span(s) for s in records.spans],
        "commands": _commands(records.spans),
        "calls": _calls(records, trajectory),
        "rewards": _rewards(records),
        "transitions": _transitions(trajectory),
        "diagnostics": trajectory.diagnostics.model_dump(mode="json"),
    }


def _commands(spans: Sequence[Span]) -> list[dict[str, Any]]:
    """How a command agent and its verifier ended (``fulmen.command`` spans), in order."""
    fields = {
        "role": semconv.COMMAND_ROLE,
        "status": semconv.COMMAND_STATUS,
        "exit_code": semconv.COMMAND_EXIT_CODE,
        "duration_s": semconv.COMMAND_DURATION_S,
        "output_bytes": semconv.COMMAND_OUTPUT_BYTES,
        "sandbox": semconv.COMMAND_SANDBOX,
        "stdout": semconv.COMMAND_STDOUT,
        "stderr": semconv.COMMAND_STDERR,
    }
    ended = sorted((s for s in spans if s.name == semconv.SPAN_COMMAND), key=lambda s: s.sequence)
    return [{key: span.attributes.get(name) for key, name in fields.items()} for span in ended]


def _span(span: Span) -> dict[str, Any]:
    return {
        "span_id": span.span_id,
        "parent_id": span.parent_id,
        "name": span.name,
        "sequence": span.sequence,
        "start_time": span.start_time,
        "end_time": span.end_time,
        "status": span.status.code.value,
        "attributes": span.attributes,
        "events": [e.model_dump(mode="json") for e in span.events],
    }


def _calls(records: AttemptRecords, trajectory: Trajectory) -> list[dict[str, Any]]:
    trained = {call_id for t in trajectory.transitions for call_id in t.call_ids}
    signals = read_signals(records.calls, records.spans, records.rewards)
    ordered = sorted(records.calls, key=lambda c: c.sequence)
    return [
        _call(call, agent, reward, call.call_id in trained)
        for call, agent, reward in zip(
            ordered, signals.agent_names, signals.call_rewards, strict=True
        )
    ]


def _call(call: LLMCall, agent: str | None, reward: float | None, trained: bool) -> dict[str, Any]:
    """Return a call's messages, reply, tool calls and token view."""
    response = call.response or {}
    choices = response.get("choices")
    reply: Any = None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        first: dict[str, Any] = choices[0]
        reply = first.get("message", first.get("text"))
    choice = call.choices[0] if call.choices else None
    tokens: dict[str, Any] | None = None
    if choice is not None and choice.token_ids:
        shown = choice.token_ids[:_MAX_TOKENS_SHOWN]
        tokens = {
            "ids": shown,
            "logprobs": (choice.logprobs or [])[: len(shown)],
            "trained": trained,
            "cut": len(choice.token_ids) - len(shown),
        }
    return {
        "call_id": call.call_id,
        "sequence": call.sequence,
        "endpoint": call.endpoint,
        "agent": agent,
        "model": call.model,
        "policy_version": call.policy_version,
        "started_at": call.started_at,
        "latency_s": call.latency_s,
        "is_token_level": call.is_token_level,
        "prompt_tokens": len(call.prompt_token_ids) if call.prompt_token_ids else None,
        "messages": call.request.get("messages", call.request.get("input")),
        "tools": call.request.get("tools"),
        "reply": reply,
        "text": choice.text if choice is not None else None,
        "finish_reason": choice.finish_reason if choice is not None else None,
        "error": call.error,
        "reward": reward,
        "tokens": tokens,
    }


def _rewards(records: AttemptRecords) -> dict[str, Any]:
    """Return the final reward and every reward that went into it, in store order."""
    emitted = [
        {
            "sequence": e.sequence,
            "values": e.values,
            "primary": e.primary,
            "source": e.source,
            "agent": e.agent_name,
            "kind": "span",
        }
        for e in semconv.reward_events(records.spans)
    ]
    posted = [_posted(r) for r in records.rewards]
    ordered = sorted(records.calls, key=lambda c: c.sequence)
    signals = call_signals(ordered, records.spans)
    air = [
        {"call_index": k, "call_id": call.call_id, "signals": fired}
        for k, (call, fired) in enumerate(zip(ordered, signals, strict=True))
        if fired
    ]
    return {
        "final": records.final_reward,
        "events": sorted([*emitted, *posted], key=lambda e: e["sequence"]),
        "air": air,
    }


def _posted(reward: Reward) -> dict[str, Any]:
    return {
        "sequence": reward.sequence,
        "values": reward.values,
        "primary": reward.primary,
        "source": "posted",
        "agent": None,
        "kind": "posted",
        "key": reward.key,
        "metadata": reward.metadata,
    }


def _transitions(trajectory: Trajectory) -> list[dict[str, Any]]:
    return [
        {
            "call_index": t.call_index,
            "call_ids": t.call_ids,
            "agent": t.agent_name,
            "reward": t.reward,
            "rollout_reward": t.rollout_reward,
            "prompt_tokens": len(t.prompt_token_ids),
            "completion_ids": t.completion_token_ids[:_MAX_TOKENS_SHOWN],
            "logprobs": t.logprobs[:_MAX_TOKENS_SHOWN],
            "loss_mask": t.loss_mask[:_MAX_TOKENS_SHOWN],
            "trained_tokens": t.num_trained_tokens,
            "masked_tokens": len(t.loss_mask) - t.num_trained_tokens,
            "policy_version": t.policy_version,
            "is_truncated": t.is_truncated,
        }
        for t in trajectory.transitions
    ]
