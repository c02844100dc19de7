"""Training samples and micro-batches: token sequences packed by a padded-token budget.

A ``TokenSample`` is a transition reduced to what one forward pass needs: its token ids, the
positions whose tokens the loss trains, and per trained token the behaviour logprob, the
advantage and the normalization weight (computed over the whole step batch beforehand, so the
split into micro-batches does not change the loss). ``plan_micro_batches`` groups samples so
that rows x longest row stays within the budget; ``collate`` pads one group into tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from fulmen.errors import ConfigError

__all__ = ["MicroBatch", "TokenSample", "collate", "plan_micro_batches"]


@dataclass(frozen=True)
class TokenSample:
    """One sequence ready for the model.

    Attributes:
        input_ids: prompt + completion token ids.
        positions: indices into ``input_ids`` of the trained tokens (each >= 1; the token at
            ``p`` is predicted from the hidden state at ``p - 1``).
        old_logprobs / advantages / norm: one value per position.
        rollout: index of the sample's rollout in the step batch.
        is_stale: an older policy than the one being trained sampled it (asynchronous
            training corrects its tokens by truncated importance sampling).
    """

    input_ids: list[int]
    positions: list[int]
    old_logprobs: list[float]
    advantages: list[float]
    norm: list[float]
    rollout: int
    is_stale: bool = False

    def __post_init__(self) -> None:
        n = len(self.positions)
        for name in ("old_logprobs", "advantages", "norm"):
            if len(getattr(self, name)) != n:
                raise ConfigError(f"{name} has {len(getattr(self, name))} values for {n} positions")
        if self.positions and (min(self.positions) < 1 or max(self.positions) >= len(self)):
            raise ConfigError(f"positions must lie in [1, {len(self) - 1}]; got {self.positions}")

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class MicroBatch:
    """Padded tensors of a group of samples; per-token tensors are flat ``[N]``.

    ``is_stale`` marks the tokens of stale samples (bool), ``None`` when no sample is stale.
    """

    input_ids: Tensor
    attention_mask: Tensor
    rows: Tensor
    positions: Tensor
    old_logprobs: Tensor
    advantages: Tensor
    norm: Tensor
    token_rollout: Tensor
    is_stale: Tensor | None = None

    @property
    def num_tokens(self) -> int:
        """Trained tokens in this micro-batch."""
        return int(self.positions.shape[0])

    def to(self, device: torch.device) -> MicroBatch:
        """Return this micro-batch with every tensor on ``device`` (itself when already there)."""
        if self.input_ids.device == device:
            return self
        moved = {
            f.name: (v.to(device) if isinstance(v := getattr(self, f.name), Tensor) else v)
            for f in fields(self)
        }
        return MicroBatch(**moved)


def plan_micro_batches(*, lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Group sample indices so each group's ``rows * longest row`` is at most ``token_budget``.

    Samples are taken longest first (less padding); a sample longer than the budget forms a
    group of its own. The result covers every index exactly once.
    """
    if token_budget < 1:
        raise ConfigError(f"token_budget must be >= 1; got {token_budget}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        length = lengths[index]
        if current and (len(current) + 1) * max(longest, length) > token_budget:
            groups.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        groups.append(current)
    return groups


def collate(samples: Sequence[TokenSample], *, pad_id: int = 0) -> MicroBatch:
    """Right-pad ``samples`` into one ``MicroBatch``."""
    if not samples:
        raise ConfigError("cannot collate an empty micro-batch")
    width = max(len(s) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.long)
    for row, sample in enumerate(samples):
        ids[row, : len(sample)] = torch.tensor(sample.input_ids, dtype=torch.long)
        mask[row, : len(sample)] = 1
    rows = [row for row, s in enumerate(samples) for _ in s.positions]
    return MicroBatch(
        input_ids=ids,
        attention_mask=mask,
        rows=torch.tensor(rows, dtype=torch.long),
        positions=torch.tensor([p for s in samples for p in s.positions], dtype=torch.long),
        old_logprobs=torch.tensor([v for s in samples for v in s.old_logprobs]),
        advantages=torch.tensor([v for s in samples for v in s.advantages]),
        norm=torch.tensor([v for s in samples for v in s.norm]),
        token_rollout=torch.tensor([s.rollout for s in samples for _ in s.positions]),
        is_stale=(
            torch.tensor([s.is_stale for s in samples for _ in s.positions], dtype=torch.bool)
            if any(s.is_stale for s in samples)
            else None
        ),
    )
