"""From transitions to PPO's calls: whole rollouts in call order, and their micro-batches.

A rollout is trained whole or not at all: GAE bootstraps each call from the next call's
value, so a rollout with a call that cannot run (longer than ``max_seq_len``, an empty prompt,
no generated token) is dropped with all its calls and counted. The kept calls are laid out
flat, each rollout's together and in ``call_index`` order, the layout ``gae`` takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fulmen.algorithms.batching import MicroBatch, TokenSample, collate
from fulmen.algorithms.ppo.rewards import episodes
from fulmen.types.transitions import Transition

__all__ = ["CallBatch", "PPOCall", "collate_calls", "select_calls", "with_advantages"]


@dataclass(frozen=True)
class PPOCall:
    """One call of a kept rollout.

    Attributes:
        sample: its tokens, trained positions and behaviour logprobs (advantages and loss
            weights are filled in once the step's values are known: ``with_advantages``).
        value_position: the index of its last prompt token, where the value head reads.
        reward: its step reward (``Transition.reward``: ``rewards.step_rewards``).
        is_last: it is its rollout's last kept call.
    """

    sample: TokenSample
    value_position: int
    reward: float
    is_last: bool


def select_calls(
    transitions: Sequence[Transition], *, max_seq_len: int
) -> tuple[list[PPOCall], int]:
    """Return the calls of the rollouts that can be trained whole, and how many were dropped."""
    calls: list[PPOCall] = []
    kept = dropped = 0
    for episode in episodes(transitions):
        if not all(_fits(t, max_seq_len) for t in episode.calls):
            dropped += 1
            continue
        for k, t in enumerate(episode.calls):
            calls.append(_call(t, kept, is_last=k == len(episode.calls) - 1))
        kept += 1
    return calls, dropped


def _fits(t: Transition, max_seq_len: int) -> bool:
    return (
        bool(t.prompt_token_ids)
        and len(t.prompt_token_ids) + len(t.completion_token_ids) <= max_seq_len
        and any(t.loss_mask)
    )


def _call(t: Transition, rollout: int, *, is_last: bool) -> PPOCall:
    start = len(t.prompt_token_ids)
    positions = [start + j for j, m in enumerate(t.loss_mask) if m]
    zeros = [0.0] * len(positions)
    sample = TokenSample(
        input_ids=[*t.prompt_token_ids, *t.completion_token_ids],
        positions=positions,
        old_logprobs=[t.logprobs[p - start] for p in positions],
        advantages=zeros,
        norm=zeros,
        rollout=rollout,
    )
    return PPOCall(sample, value_position=start - 1, reward=t.reward, is_last=is_last)


def with_advantages(
    calls: Sequence[PPOCall], advantages: Sequence[float], norm: Sequence[float]
) -> list[PPOCall]:
    """Return ``calls`` with each call's advantage on its tokens and the tokens' loss weights.

    ``norm`` holds one weight per trained token, in the calls' order.
    """
    out: list[PPOCall] = []
    offset = 0
    for call, advantage in zip(calls, advantages, strict=True):
        n = len(call.sample.positions)
        sample = dataclasses.replace(
            call.sample, advantages=[advantage] * n, norm=list(norm[offset : offset + n])
        )
        out.append(dataclasses.replace(call, sample=sample))
        offset += n
    return out


@dataclass(frozen=True)
class CallBatch:
    """A micro-batch of calls: the padded tokens, and per row (call) what the value loss needs.

    Attributes:
        tokens: the calls' token micro-batch (``fulmen.algorithms.batching``).
        indices: ``[B]`` each row's index among the step's calls.
        value_positions: ``[B]`` each row's last prompt position.
    """

    tokens: MicroBatch
    indices: Tensor
    value_positions: Tensor

    def to(self, device: torch.device) -> CallBatch:
        """Return this batch with every tensor on ``device``."""
        return CallBatch(
            self.tokens.to(device), self.indices.to(device), self.value_positions.to(device)
        )


def collate_calls(calls: Sequence[PPOCall], group: Sequence[int], *, pad_id: int) -> CallBatch:
    """Collate the calls ``group`` names (indices into ``calls``) into one ``CallBatch``."""
    chosen = [calls[i] for i in group]
    return CallBatch(
        tokens=collate([c.sample for c in chosen], pad_id=pad_id),
        indices=torch.tensor(list(group), dtype=torch.long),
        value_positions=torch.tensor([c.value_position for c in chosen], dtype=torch.long),
    )
