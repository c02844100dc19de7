"""``dev``: run a few rollouts and show what training would see, without training.

For each rollout: its status and reward, every LLM call (agent, prompt tail, completion, token
counts, whether it is usable for token-level RL), the tool results the agent sent with the call
and the tool calls the model made in it, and the transitions built from them. Tool calls and
results are read from the recorded request and response, in the Chat Completions shape
(``tool_calls`` / ``role: tool`` messages) or the Responses shape (``function_call`` /
``function_call_output`` items). Transitions longer than GRPO's ``max_seq_len`` (the one set,
else the engine's context) are named in a warning before any training drops them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from fulmen.agent.rollouts import RolloutSettings
from fulmen.tracing.outcome import command_outcomes, no_reward_reason
from fulmen.trainer.stack import TrainingStack
from fulmen.types import (
    LLMResource,
    Mode,
    ResourcesCreate,
    RolloutConfig,
    RolloutCreate,
    RolloutStatus,
)

if TYPE_CHECKING:
    from fulmen.trainer.config import TrainConfig

__all__ = [
    "configured_max_seq_len",
    "dev_failure",
    "max_seq_len_option",
    "run_dev",
    "tool_calls_of",
    "tool_results_of",
]


def _tail(text: Any, width: int = 70) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else "…" + flat[-(width - 1) :]


def _prompt_of(request: dict[str, Any]) -> str:
    messages = request.get("messages")
    if isinstance(messages, list) and messages:
        last = messages[-1]
        return str(last.get("content", "")) if isinstance(last, dict) else str(last)
    return str(request.get("prompt", ""))


def tool_calls_of(response: Any) -> list[tuple[str, str]]:
    """Return the tool calls a recorded response made, as ``(name, arguments JSON)`` pairs."""
    if not isinstance(response, dict):
        return []
    found: list[tuple[str, str]] = []
    for choice in response.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        for call in (message or {}).get("tool_calls") or []:
            function = call.get("function") or {}
            found.append((str(function.get("name")), _arguments(function.get("arguments"))))
    for item in response.get("output") or []:  # the Responses API
        if isinstance(item, dict) and item.get("type") == "function_call":
            found.append((str(item.get("name")), _arguments(item.get("arguments"))))
    return found


def tool_results_of(request: dict[str, Any]) -> list[tuple[str, str]]:
    """Return the tool results a request sent back, as ``(tool name, content)`` pairs.

    They are the tool messages (or ``function_call_output`` items) after the request's last
    other message: what the agent answered to the model's previous tool calls. The name comes
    from the tool call with the same id earlier in the request (``?`` when it is not there).
    """
    items: Any = request.get("messages")
    if not isinstance(items, list):
        items = request.get("input")  # the Responses API
    if not isinstance(items, list):
        return []
    names: dict[str, str] = {}
    trailing: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("role") == "tool" or item.get("type") == "function_call_output":
            trailing.append(item)
            continue
        trailing = []
        for call in item.get("tool_calls") or []:
            names[str(call.get("id"))] = str((call.get("function") or {}).get("name"))
        if item.get("type") == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
    return [
        (
            names.get(str(item.get("tool_call_id", item.get("call_id"))), "?"),
            str(item.get("content", item.get("output", ""))),
        )
        for item in trailing
    ]


def _arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


async def run_dev(
    stack: TrainingStack,
    tasks: Sequence[Any],
    *,
    task_ids: Sequence[str],
    model: str,
    options: Any,
    rollouts: RolloutSettings,
    mode: Mode = Mode.VAL,
    out: TextIO,
    max_seq_len: int | None = None,
    max_seq_len_option: str = "the updater's max_seq_len",
) -> list[dict[str, Any]]:
    """Run one rollout of ``mode`` per task on ``stack`` and print a report to ``out``.

    ``mode`` picks the sampling: ``train`` at ``rollouts.train_sampling``, else
    ``val_sampling``. ``max_seq_len`` is the updater's length limit when the config sets one
    (``max_seq_len_option`` names it); else the engine's context (``/v1/models``) is the
    limit transitions are checked against.
    """
    from fulmen.transitions.trajectory import load_attempt

    store = stack.store
    llm = LLMResource(
        base_url=stack.engine_url,
        model=model,
        sampling={"default": rollouts.val_sampling, "train": rollouts.train_sampling},
    )
    version = (await store.add_resources(ResourcesCreate(resources={"llm": llm}))).version
    created = await store.enqueue(
        [
            RolloutCreate(
                input=task,
                mode=mode,
                task_id=task_id,
                resources_version=version,
                config=RolloutConfig(timeout_s=rollouts.timeout_s),
            )
            for task, task_id in zip(tasks, task_ids, strict=True)
        ]
    )
    ids = [r.rollout_id for r in created]
    started = time.monotonic()
    done: list[Any] = []
    while len(done) < len(ids):
        done = await store.wait_for_rollouts(ids, timeout=5.0)
        stack.check_runner()
        if time.monotonic() - started > rollouts.timeout_s + 60:
            break
    report: list[dict[str, Any]] = []
    lengths: list[int] = []
    for rollout in await _in_order(store, ids):
        records = await load_attempt(store, rollout.rollout_id)
        trajectory = records.trajectory(options=options)
        attempts = await store.list_attempts(rollout.rollout_id)
        error = attempts[-1].error if attempts else None
        out.write(
            f"\n== rollout {rollout.rollout_id} task={rollout.task_id} "
            f"status={rollout.status.value} reward={records.final_reward}\n"
        )
        if error:
            out.write(f"   error: {_tail(error, 300)}\n")
        commands = command_outcomes(records.spans)
        for command in commands:
            out.write(f"   {command.summary(calls=len(records.calls))}\n")
            if command.crashed:
                tail = command.stderr_tail()
                out.write(
                    f"      stderr (last {len(tail)} lines):\n" if tail else "      no stderr\n"
                )
                out.writelines(f"      | {line}\n" for line in tail)
        reward = records.final_reward
        why = (
            no_reward_reason(records.spans, calls=len(records.calls))
            if reward is None and rollout.status is RolloutStatus.SUCCEEDED
            else None
        )
        if why is not None:
            out.write(f"   no reward: {why}\n")
        named = _named_rewards(records)
        if len(named) > 1 or (named and "reward" not in named):
            parts = " ".join(f"{name}={value:.3f}" for name, value in sorted(named.items()))
            out.write(f"   rewards: {parts}\n")
        tool_calls = 0
        # Numbered within the rollout; the store's sequence numbers also count spans.
        for number, call in enumerate(records.calls, start=1):
            choice = call.choices[0] if call.choices else None
            text = choice.text if choice else None
            n_prompt = len(call.prompt_token_ids or [])
            n_completion = len(choice.token_ids or []) if choice else 0
            out.write(
                f"   call #{number} model={call.model} prompt={n_prompt} tok "
                f"completion={n_completion} tok token_level={call.is_token_level}\n"
            )
            for name, content in tool_results_of(call.request):
                out.write(f"      tool result: {name} -> {_tail(content, 200)}\n")
            out.write(f"      prompt:     {_tail(_prompt_of(call.request))}\n")
            made = tool_calls_of(call.response)
            if text is not None or not made:  # a turn that is only tool calls has no text
                out.write(f"      completion: {_tail(text)}\n")
            for name, arguments in made:
                tool_calls += 1
                out.write(f"      tool call:   {name}({_tail(arguments, 200)})\n")
        for t in trajectory.transitions:
            lengths.append(len(t.prompt_token_ids) + len(t.completion_token_ids))
            out.write(
                f"   transition call={t.call_index} agent={t.agent_name} "
                f"prompt={len(t.prompt_token_ids)} completion={len(t.completion_token_ids)} "
                f"trained={sum(t.loss_mask)} reward={t.reward:.3f}\n"
            )
        report.append(
            {
                "rollout_id": rollout.rollout_id,
                "status": rollout.status.value,
                "reward": records.final_reward,
                "calls": len(records.calls),
                "tool_calls": tool_calls,
                "transitions": len(trajectory.transitions),
                "rewards": named,
                "error": error,
                "no_reward": why,
                "commands": [
                    {
                        "role": c.role,
                        "status": c.status,
                        "exit_code": c.exit_code,
                        "duration_s": c.duration_s,
                        "stderr_tail": c.stderr_tail(),
                    }
                    for c in commands
                ],
            }
        )
    succeeded = [r for r in report if r["status"] == RolloutStatus.SUCCEEDED.value]
    rewards = [r["reward"] for r in succeeded if r["reward"] is not None]
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    out.write(
        f"\n{len(succeeded)}/{len(report)} rollouts succeeded, {len(rewards)} with a reward; "
        f"mean reward {mean:.3f}; {sum(r['transitions'] for r in report)} transitions\n"
    )
    limit = max_seq_len or await _engine_context(stack.engine_url)
    over = [n for n in lengths if limit is not None and n > limit]
    if over and limit is not None:
        shown = ", ".join(str(n) for n in sorted(over, reverse=True)[:8])
        setting = max_seq_len_option if max_seq_len else "the model's context"
        out.write(
            f"warning: {len(over)} of {len(lengths)} transitions are longer than {setting} "
            f"({limit} tokens): {shown} tokens. Training drops them; raise "
            f"{max_seq_len_option} (unset, it is the model's context) or shorten the "
            "agent's prompts\n"
        )
    return report


def dev_failure(report: Sequence[dict[str, Any]]) -> str | None:
    """Say why ``fulmen dev`` must exit non-zero for ``report`` (``run_dev``'s), else ``None``.

    Every rollout failed: the first error. No rollout produced a reward: the first rollout's
    reason (a crashed command with its exit status and last stderr line, an agent that
    returned ``None``). Training would learn nothing from either.
    """
    from fulmen.errors import error_summary

    if not report:
        return None
    failed = [r for r in report if r["status"] != RolloutStatus.SUCCEEDED.value]
    if len(failed) == len(report):
        first = error_summary(failed[0]["error"]) or failed[0]["status"]
        return f"every rollout failed; the first: {first} (its traceback is above)"
    if any(r["reward"] is not None for r in report):
        return None
    why = next((r.get("no_reward") for r in report if r.get("no_reward")), None)
    return (
        f"no rollout produced a reward, so training would learn nothing; the first: "
        f"{why or 'no reward was recorded'}"
    )


def configured_max_seq_len(config: TrainConfig) -> int | None:
    """Return the smallest ``max_seq_len`` the config's stages set (``None``: none).

    Each updater's settings have one (``AlgorithmSection.max_seq_len_settings``); unset, it is
    the model's context, which the engine reports.
    """
    limits = [limit for _, limit in _updater_limits(config) if limit is not None]
    return min(limits) if limits else None


def max_seq_len_option(config: TrainConfig) -> str:
    """Name the ``max_seq_len`` setting of the config's (first) updater, for messages."""
    named = [option for option, _ in _updater_limits(config)]
    return named[0] if named else "the updater's max_seq_len"


def _updater_limits(config: TrainConfig) -> list[tuple[str, int | None]]:
    """Each stage's updater length limit: (its option, its value; ``None``: the model's)."""
    plan = config.plan()
    where = [f"stages.{i}" for i in range(len(plan))] if config.stages else ["algorithm"]
    found: list[tuple[str, int | None]] = []
    for prefix, stage in zip(where, plan, strict=True):
        setting = stage.max_seq_len_settings()
        if setting is not None:
            found.append((f"{prefix}.{setting[0]}", setting[1]))
    return found


async def _engine_context(base_url: str) -> int | None:
    """Return the context ``max_model_len`` the engine reports at ``/models`` (``None``: none)."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=10) as client:
            body = (await client.get(f"{base_url.rstrip('/')}/models")).json()
        values = [m.get("max_model_len") for m in body.get("data", [])]
    except (httpx.HTTPError, ValueError, AttributeError, TypeError):
        return None
    known = [int(v) for v in values if isinstance(v, int) and v > 0]
    return min(known) if known else None


def _named_rewards(records: Any) -> dict[str, float]:
    """Every named reward of the attempt: emitted (reward spans), then posted, later wins."""
    from fulmen.tracing.semconv import rewards_from_spans

    named = rewards_from_spans(records.spans)
    for posted in sorted(records.rewards, key=lambda r: r.sequence):
        named.update(posted.values)
    return named


async def _in_order(store: Any, ids: Sequence[str]) -> list[Any]:
    return [await store.get_rollout(rollout_id) for rollout_id in ids]
