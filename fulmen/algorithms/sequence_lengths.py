"""Long sequences in the updaters: the length limit, when to checkpoint, what was dropped.

Coding agents send 20-50k-token prompts. Three things let such a transition train:

- the limit comes from the model unless set: :func:`resolve_max_seq_len` returns the model's
  context (``max_position_embeddings``, 32,768 for Gemma 3 270M) when ``max_seq_len`` is not
  configured, so nothing the engine could serve is dropped for length by default;
- activations are recomputed in the backward (activation checkpointing) for a micro-batch
  longer than the micro-batch budget, which only a single sequence over the budget is
  (``plan_micro_batches`` packs shorter ones within it): :func:`is_checkpointed` decides, so
  short batches keep their speed and a 30k-token sequence holds one layer's activations at a
  time instead of every layer's;
- the LM head and its log-softmax run over chunks of the trained tokens
  (``policy.token_logprobs``), and the attention over blocks of queries
  (``fulmen.attention``), so neither a ``[tokens x vocabulary]`` nor a ``[tokens x tokens]``
  tensor is ever held whole.

A transition longer than the limit is still dropped; :func:`overlong_lengths` and
:func:`overlong_warning` say which, with their lengths, every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fulmen.types.transitions import Transition

__all__ = [
    "FALLBACK_MAX_SEQ_LEN",
    "describe_plan",
    "is_checkpointed",
    "model_context",
    "overlong_lengths",
    "overlong_warning",
    "padded_tokens",
    "resolve_max_seq_len",
]

#: The limit for a model whose config names no context.
FALLBACK_MAX_SEQ_LEN = 8192


def model_context(model: Any) -> int | None:
    """Return a causal LM's context (a peft model is unwrapped): ``max_position_embeddings``."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    config = getattr(base, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 1 else None


def resolve_max_seq_len(configured: int | None, model: Any) -> int:
    """Return ``configured``, else the model's context, else :data:`FALLBACK_MAX_SEQ_LEN`."""
    if configured is not None:
        return configured
    return model_context(model) or FALLBACK_MAX_SEQ_LEN


def is_checkpointed(setting: bool | None, *, padded_tokens: int, budget: int) -> bool:
    """Say whether a micro-batch of ``padded_tokens`` (rows x longest row) is checkpointed.

    ``setting`` is the config's ``gradient_checkpointing``: ``True`` always, ``False`` never,
    ``None`` (the default) only above ``budget`` (``micro_batch_tokens``).
    """
    if setting is not None:
        return setting
    return padded_tokens > budget


def padded_tokens(plan: Sequence[Sequence[int]], lengths: Sequence[int]) -> list[int]:
    """Return rows x longest row of each micro-batch of ``plan`` (indices into ``lengths``)."""
    return [len(group) * max(lengths[i] for i in group) for group in plan]


def describe_plan(padded: Sequence[int], *, budget: int, setting: bool | None) -> tuple[bool, str]:
    """Say whether an update has a micro-batch over ``budget``, and describe it in a line."""
    long = [n for n in padded if n > budget]
    recomputed = any(is_checkpointed(setting, padded_tokens=n, budget=budget) for n in padded)
    note = ", activations recomputed in the backward" if recomputed else ""
    line = (
        f"updating in {len(padded)} micro-batches of {sum(padded)} padded tokens (the longest "
        f"{max(padded, default=0)}{note})"
    )
    return bool(long), line


def overlong_lengths(transitions: Sequence[Transition], max_seq_len: int) -> list[int]:
    """List the lengths (prompt + completion) of the transitions over ``max_seq_len``."""
    lengths = (len(t.prompt_token_ids) + len(t.completion_token_ids) for t in transitions)
    return [n for n in lengths if n > max_seq_len]


def overlong_warning(
    lengths: Sequence[int], *, max_seq_len: int, context: int | None, option: str
) -> str:
    """Say in one line which transitions were dropped for length and what to change.

    ``option`` names the setting (``algorithm.grpo.max_seq_len``).
    """
    shown = ", ".join(str(n) for n in sorted(lengths, reverse=True)[:8])
    more = f" and {len(lengths) - 8} more" if len(lengths) > 8 else ""
    room = (
        f"raise {option} (the model's context is {context} tokens)"
        if context is not None and context > max_seq_len
        else f"shorten the agent's prompts (the model's context is {context} tokens)"
        if context is not None
        else f"raise {option}"
    )
    return (
        f"{len(lengths)} transition(s) longer than {option} {max_seq_len} were dropped "
        f"(lengths {shown}{more} tokens); {room}"
    )
