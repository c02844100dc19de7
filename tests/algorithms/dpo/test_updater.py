"""A DPO step on a tiny model: the margin of chosen over rejected rises, the split is exact."""

from __future__ import annotations

import math

import pytest
import torch

from fulmen.algorithms.dpo import DPOConfig
from fulmen.algorithms.dpo.pairs import PreferencePair
from fulmen.algorithms.dpo.updater import DPOUpdater
from fulmen.algorithms.lora import LoraSettings

from ..builders import gradient, model_logprobs
from ..models import tiny_llama

pytest.importorskip("peft")


def _pair(prompt: list[int], chosen: list[int], rejected: list[int]) -> PreferencePair:
    return PreferencePair(
        prompt=prompt,
        chosen=chosen,
        rejected=rejected,
        chosen_mask=[1] * len(chosen),
        rejected_mask=[1] * len(rejected),
        chosen_reward=1.0,
        rejected_reward=0.0,
        chosen_rollout="w",
        rejected_rollout="l",
        group="t",
        position=0,
    )


PAIRS = [
    _pair([1, 10, 11], [7, 7, 7, 7], [20, 21, 22, 23]),
    _pair([1, 12, 13, 14], [7, 7, 7], [30, 31, 32]),
    _pair([1, 15], [7, 7, 7, 7, 7], [40, 41]),
]


def _updater(**settings: object) -> DPOUpdater:
    config = DPOConfig(lora=LoraSettings(r=4, alpha=8), seed=0, **settings)  # type: ignore[arg-type]
    return DPOUpdater(tiny_llama(seed=0), config=config)


def test_a_step_raises_the_margin_of_chosen_over_rejected() -> None:
    updater = _updater(learning_rate=1e-2, beta=0.5)
    # LoRA starts at zero: the policy is its reference and every margin is 0
    assert updater.margins(PAIRS) == [0.0, 0.0, 0.0]
    first = updater.train_step(PAIRS)
    assert first["updated"] == 1.0
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert first["dpo/margin"] == 0.0 and first["dpo/accuracy"] == 0.0
    after = updater.margins(PAIRS)
    assert all(m > 0 for m in after), after
    for _ in range(4):
        last = updater.train_step(PAIRS)
    assert last["dpo/accuracy"] == 1.0
    assert last["loss"] < math.log(2)
    assert sum(updater.margins(PAIRS)) > sum(after)


def test_the_reference_is_the_base_model_without_the_adapter() -> None:
    updater = _updater(learning_rate=1e-2)
    updater.train_step(PAIRS)
    base = tiny_llama(seed=0)
    pair = PAIRS[0]
    (ids, positions), _ = pair.sequences()
    batch = updater._collate([pair])
    reference = updater._reference_logps(batch)
    expected = sum(model_logprobs(base, pair.prompt, pair.chosen))
    assert float(reference[0]) == pytest.approx(expected, abs=1e-5)
    policy = sum(model_logprobs(updater.model, pair.prompt, pair.chosen))
    assert policy != pytest.approx(expected, abs=1e-5)  # the adapter moved the policy
    assert len(positions) == len(pair.chosen) and len(ids) == 7


def test_the_micro_batch_split_does_not_change_the_gradient() -> None:
    whole = _updater(learning_rate=1e-2, micro_batch_tokens=4096)
    split = _updater(learning_rate=1e-2, micro_batch_tokens=2)  # one pair per micro-batch
    for updater in (whole, split):  # off the reference, so the loss is not at its log 2 start
        updater.train_step(PAIRS[:1])
    a, b = whole.compute_gradients(PAIRS), split.compute_gradients(PAIRS)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert a["dpo/margin"] == pytest.approx(b["dpo/margin"], abs=1e-6)
    torch.testing.assert_close(gradient(whole.model), gradient(split.model), atol=1e-7, rtol=1e-5)


def test_no_pair_takes_no_step_and_overlong_pairs_are_counted() -> None:
    updater = _updater(max_seq_len=6)
    short = _pair([1, 16], [7], [50])
    metrics = updater.train_step([*PAIRS, short])  # each of PAIRS has a 7-token sequence
    assert metrics["dpo/dropped_overlong"] == 3.0
    assert metrics["dpo/trained_pairs"] == 1.0
    assert updater.train_step([])["updated"] == 0.0


def test_unset_max_seq_len_is_the_models_context() -> None:
    updater = _updater()  # tiny_llama: 128 positions
    assert updater.config.max_seq_len is None and updater.max_seq_len == 128
    metrics = updater.train_step([_pair([1, *[16] * 126], [7], [50]), *PAIRS])  # 128 tokens
    assert metrics["dpo/dropped_overlong"] == 0.0
    metrics = updater.train_step([_pair([1, *[16] * 127], [7], [50]), *PAIRS])  # 129
    assert metrics["dpo/dropped_overlong"] == 1.0
