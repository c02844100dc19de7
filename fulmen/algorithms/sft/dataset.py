"""From kept attempts to SFT examples: the recorded token ids of the selected completions.

A call the gateway recorded with token ids becomes an example through its
transition (``fulmen.transitions``), so the ids are exactly what the model saw and produced, never
re-tokenized text; agent selection and token-exact merging apply as in GRPO. A call recorded
without token ids (a hosted teacher's reply: distillation) has only text; it is tokenized once
here with the student's chat template — the prompt rendered with the generation prompt, the
reply as the rest of the rendered conversation — and the example is flagged
``is_retokenized`` so the metrics say how much of the data did not come from recorded ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fulmen.transitions.export import call_conversation
from fulmen.transitions.signals import read_signals
from fulmen.transitions.trajectory import AttemptRecords, TransitionOptions
from fulmen.types import LLMCall
from fulmen.types.transitions import Transition

__all__ = ["DatasetStats", "SFTExample", "build_dataset", "retokenize"]


@dataclass(frozen=True)
class SFTExample:
    """One training sequence.

    Attributes:
        input_ids: prompt + completion token ids.
        positions: indices into ``input_ids`` of the trained tokens (the completion tokens the
            model generated; observation tokens of merged calls are not trained).
        rollout_id: the rollout it came from.
        call_ids: the recorded calls it holds.
        is_retokenized: built from text with the student's chat template (a text-only call).
    """

    input_ids: list[int]
    positions: list[int]
    rollout_id: str
    call_ids: list[str]
    is_retokenized: bool = False


@dataclass
class DatasetStats:
    """What ``build_dataset`` read, kept and dropped."""

    rollouts: int = 0
    kept_rollouts: int = 0
    examples: int = 0
    retokenized: int = 0
    trained_tokens: int = 0
    dropped_overlong: int = 0
    skipped_text_only: int = 0

    def as_metrics(self) -> dict[str, float]:
        """Flat float metrics (``sft/...``), with the kept fraction of the rollouts."""
        metrics = {f"sft/{k}": float(v) for k, v in vars(self).items()}
        metrics["sft/kept_fraction"] = self.kept_rollouts / self.rollouts if self.rollouts else 0.0
        return metrics


def build_dataset(
    attempts: Sequence[AttemptRecords],
    *,
    options: TransitionOptions,
    min_reward: float,
    max_seq_len: int,
    tokenizer: Any = None,
) -> tuple[list[SFTExample], DatasetStats]:
    """Turn the attempts whose final reward reaches ``min_reward`` into SFT examples.

    Args:
        attempts: finished attempts (calls and spans).
        options: the transition options (agent selection, merging).
        min_reward: attempts below it, or without a reward, are not kept.
        max_seq_len: longer examples are dropped and counted.
        tokenizer: the student's tokenizer, to tokenize text-only calls; ``None`` skips them
            (counted as ``skipped_text_only``).
    """
    stats = DatasetStats(rollouts=len(attempts))
    examples: list[SFTExample] = []
    for attempt in attempts:
        reward = attempt.final_reward
        if reward is None or reward < min_reward:
            continue
        stats.kept_rollouts += 1
        candidates = [_from_transition(t) for t in attempt.trajectory(options=options).transitions]
        for call in _text_only_calls(attempt, options):
            if tokenizer is None:
                stats.skipped_text_only += 1
                continue
            example = retokenize(call, tokenizer, rollout_id=attempt.rollout_id)
            if example is None:
                stats.skipped_text_only += 1
            else:
                candidates.append(example)
        for example in candidates:
            if len(example.input_ids) > max_seq_len:
                stats.dropped_overlong += 1
            elif example.positions:
                examples.append(example)
                stats.retokenized += example.is_retokenized
                stats.trained_tokens += len(example.positions)
    stats.examples = len(examples)
    return examples, stats


def _from_transition(t: Transition) -> SFTExample:
    start = len(t.prompt_token_ids)
    positions = [start + j for j, m in enumerate(t.loss_mask) if m and start + j >= 1]
    return SFTExample(
        input_ids=[*t.prompt_token_ids, *t.completion_token_ids],
        positions=positions,
        rollout_id=t.rollout_id,
        call_ids=list(t.call_ids),
    )


def _text_only_calls(attempt: AttemptRecords, options: TransitionOptions) -> list[LLMCall]:
    """List the selected calls without token ids (no transitions are built from them)."""
    ordered = sorted(attempt.calls, key=lambda c: c.sequence)
    agents = read_signals(ordered, attempt.spans).agent_names
    return [
        call
        for call, agent in zip(ordered, agents, strict=True)
        if options.selects(agent) and call.error is None and _is_text_only(call)
    ]


def _is_text_only(call: LLMCall) -> bool:
    return call.prompt_token_ids is None or not call.choices or call.choices[0].token_ids is None


def retokenize(call: LLMCall, tokenizer: Any, *, rollout_id: str) -> SFTExample | None:
    """Tokenize a text-only chat call with ``tokenizer``'s chat template.

    The prompt is the request's messages rendered with the generation prompt; the trained
    tokens are what the full conversation (the reply appended) adds after it, up to and
    including the template's end-of-turn token: what a template writes after that (Qwen's and
    Gemma's newline) is never generated, so it is not trained. ``None`` when the call is not a
    plain-text chat exchange or the template does not extend the prompt.
    """
    conversation = call_conversation(call)
    if conversation is None or not all(
        isinstance(m, dict) and isinstance(m.get("content"), str) for m in conversation
    ):
        return None
    messages = [{"role": m["role"], "content": m["content"]} for m in conversation]
    prompt_text = tokenizer.apply_chat_template(
        messages[:-1], add_generation_prompt=True, tokenize=False
    )
    full_text = tokenizer.apply_chat_template(messages, tokenize=False)
    if not full_text.startswith(prompt_text):
        return None
    prompt_ids = list(tokenizer.encode(prompt_text, add_special_tokens=False))
    full_ids = list(tokenizer.encode(full_text, add_special_tokens=False))
    full_ids = _through_end_of_turn(full_ids, tokenizer, start=len(prompt_ids))
    if full_ids[: len(prompt_ids)] != prompt_ids or len(full_ids) == len(prompt_ids):
        return None
    return SFTExample(
        input_ids=full_ids,
        positions=list(range(max(len(prompt_ids), 1), len(full_ids))),
        rollout_id=rollout_id,
        call_ids=[call.call_id],
        is_retokenized=True,
    )


def _through_end_of_turn(ids: list[int], tokenizer: Any, *, start: int) -> list[int]:
    """Cut the whitespace-only tokens a template writes after the reply's end-of-turn token.

    The model never generates them (Qwen's and Gemma's newline after the end of turn); a reply
    whose last special token is followed by text is kept as it is.
    """
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    last = max((i for i in range(start, len(ids)) if ids[i] in special), default=None)
    if last is None:
        return ids
    if all(not tokenizer.decode([t]).strip() for t in ids[last + 1 :]):
        return ids[: last + 1]
    return ids
