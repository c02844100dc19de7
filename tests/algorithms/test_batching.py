from __future__ import annotations

import pytest
import torch

from fulmen.algorithms.batching import TokenSample, collate, plan_micro_batches
from fulmen.errors import ConfigError


def test_plan_respects_the_padded_token_budget() -> None:
    assert plan_micro_batches(lengths=[5, 3, 8, 2], token_budget=10) == [[2], [0, 1], [3]]
    assert plan_micro_batches(lengths=[5, 3, 8, 2], token_budget=100) == [[2, 0, 1, 3]]
    assert plan_micro_batches(lengths=[4] * 8, token_budget=4) == [[i] for i in range(8)]
    assert plan_micro_batches(lengths=[], token_budget=4) == []


def test_plan_covers_every_sample_once() -> None:
    lengths = [7, 1, 30, 12, 12, 3, 9, 40]
    groups = plan_micro_batches(lengths=lengths, token_budget=32)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        assert len(group) == 1 or len(group) * max(lengths[i] for i in group) <= 32


def test_bad_budget() -> None:
    with pytest.raises(ConfigError, match="token_budget"):
        plan_micro_batches(lengths=[1], token_budget=0)


def test_collate_pads_right_and_flattens_targets() -> None:
    a = TokenSample([1, 2, 3], [2], [-0.1], [1.0], [0.5], rollout=0)
    b = TokenSample([1, 4, 5, 6, 7], [1, 3], [-0.2, -0.3], [2.0, 3.0], [0.25, 0.25], rollout=1)
    batch = collate([a, b], pad_id=9)
    assert batch.input_ids.tolist() == [[1, 2, 3, 9, 9], [1, 4, 5, 6, 7]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch.rows.tolist() == [0, 1, 1] and batch.positions.tolist() == [2, 1, 3]
    assert batch.advantages.tolist() == [1.0, 2.0, 3.0]
    assert torch.equal(batch.token_rollout, torch.tensor([0, 1, 1]))
    assert batch.num_tokens == 3


def test_sample_checks() -> None:
    with pytest.raises(ConfigError, match="positions"):
        TokenSample([1, 2], [0], [0.0], [0.0], [0.0], rollout=0)
    with pytest.raises(ConfigError, match="advantages"):
        TokenSample([1, 2], [1], [0.0], [], [0.0], rollout=0)
