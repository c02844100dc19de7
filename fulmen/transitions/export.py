"""Export training data: transitions, SFT conversations and preference pairs, to JSONL or Parquet.

Rows are plain dicts; ``write_rows`` picks the format from the file suffix (``.jsonl`` or
``.parquet``; Parquet needs the optional ``pyarrow``). SFT rows come from the chat requests and
responses the gateway recorded, read through each call's wire API (``WireApi.conversation``:
the conversation as the model saw it); preference pairs put the
best and the worst rollout of one task side by side.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fulmen.errors import ConfigError
from fulmen.transitions.trajectory import AttemptRecords
from fulmen.types import LLMCall
from fulmen.types.transitions import Transition
from fulmen.wire.table import wire_api

__all__ = [
    "call_conversation",
    "preference_rows",
    "sft_rows",
    "transition_rows",
    "write_rows",
]

Row = dict[str, Any]


def transition_rows(transitions: Iterable[Transition]) -> list[Row]:
    """One row per transition, every field as a column."""
    return [t.model_dump(mode="json") for t in transitions]


def sft_rows(
    attempts: Iterable[AttemptRecords],
    *,
    min_reward: float | None = None,
    last_call_only: bool = False,
) -> list[Row]:
    """One conversation per chat or Responses call: the request's messages plus the reply.

    Attempts whose final reward is below ``min_reward`` (or missing, when a minimum is set) are
    left out, which turns this into rejection-sampling data. Calls that failed or have no
    ``messages`` are skipped.
    """
    rows: list[Row] = []
    for attempt in attempts:
        reward = attempt.final_reward
        if min_reward is not None and (reward is None or reward < min_reward):
            continue
        calls = list(attempt.calls)[-1:] if last_call_only else attempt.calls
        for call in calls:
            conversation = call_conversation(call)
            if conversation is None:
                continue
            rows.append(
                {
                    "messages": conversation,
                    "rollout_id": attempt.rollout_id,
                    "task_id": attempt.task_id,
                    "call_id": call.call_id,
                    "reward": reward,
                }
            )
    return rows


def preference_rows(attempts: Iterable[AttemptRecords]) -> list[Row]:
    """One pair per task: the best rollout's final exchange against the worst one's.

    Tasks with a single rewarded rollout, equal best and worst rewards, or different opening
    prompts (the pair would not share a prompt) give no pair.
    """
    by_task: dict[str, list[tuple[float, AttemptRecords]]] = {}
    for attempt in attempts:
        reward = attempt.final_reward
        if attempt.task_id is None or reward is None:
            continue
        by_task.setdefault(attempt.task_id, []).append((reward, attempt))
    rows: list[Row] = []
    for task_id, scored in by_task.items():
        best = max(scored, key=lambda item: item[0])
        worst = min(scored, key=lambda item: item[0])
        if best[0] == worst[0]:
            continue
        chosen, rejected = _pair_side(best[1]), _pair_side(worst[1])
        if chosen is None or rejected is None or chosen[0] != rejected[0]:
            continue
        rows.append(
            {
                "task_id": task_id,
                "prompt": chosen[0],
                "chosen": chosen[1],
                "rejected": rejected[1],
                "chosen_reward": best[0],
                "rejected_reward": worst[0],
                "chosen_rollout_id": best[1].rollout_id,
                "rejected_rollout_id": worst[1].rollout_id,
            }
        )
    return rows


def write_rows(path: str | Path, rows: Sequence[Row]) -> Path:
    """Write rows to ``path``: JSON Lines for ``.jsonl``, Parquet for ``.parquet``.

    In Parquet, scalars and flat lists (token ids, logprobs) are native columns; nested values
    (chat messages, whose shapes vary from message to message) are stored as JSON strings.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix == ".jsonl":
        with target.open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ConfigError(
                f"writing {target} needs pyarrow: pip install 'fulmen[export]' (or pyarrow)"
            ) from exc
        table = [{k: _parquet_value(v) for k, v in row.items()} for row in rows]
        pq.write_table(pa.Table.from_pylist(table), target)
    else:
        raise ConfigError(f"unknown export format {suffix!r} for {target}; use .jsonl or .parquet")
    return target


def _parquet_value(value: Any) -> Any:
    if isinstance(value, dict) or (
        isinstance(value, list) and any(isinstance(v, dict | list) for v in value)
    ):
        return json.dumps(value, ensure_ascii=False)
    return value


def call_conversation(call: LLMCall) -> list[Any] | None:
    """Return the chat messages a call sent plus its reply, or ``None`` (failed, not a chat)."""
    messages = _messages(call)
    reply = _reply(call)
    if messages is None or reply is None or call.error is not None:
        return None
    return [*messages, reply]


def _messages(call: LLMCall) -> list[Any] | None:
    """Return a call's chat messages (for a translated API's call, those the engine got)."""
    api = wire_api(call.endpoint)
    return None if api is None else api.conversation(call.request)


def _reply(call: LLMCall) -> dict[str, Any] | None:
    """Return the assistant message of the reply, or choice 0's recorded text."""
    api = wire_api(call.endpoint)
    message = None if api is None else api.reply_message(call.response or {})
    if message is not None:
        return message
    if call.choices and call.choices[0].text is not None:
        return {"role": "assistant", "content": call.choices[0].text}
    return None


def _pair_side(attempt: AttemptRecords) -> tuple[list[Any], list[Any]] | None:
    """Return (opening prompt, what followed it in the last exchange) of an attempt."""
    usable = [c for c in attempt.calls if call_conversation(c) is not None]
    if not usable:
        return None
    opening = call_conversation(usable[0])
    last = call_conversation(usable[-1])
    if opening is None or last is None:
        return None
    prompt = opening[:-1]
    if last[: len(prompt)] != prompt:
        return prompt, last[-1:]
    return prompt, last[len(prompt) :]
