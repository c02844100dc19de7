"""The update's memory plan (a meta-device dry run) against the real step on the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fulmen.algorithms.lora import LoraSettings
from fulmen.algorithms.policy import load_causal_lm, prepare_policy, token_logprobs, update_mode
from fulmen.algorithms.update_memory import UpdateShape, plan_update
from fulmen.meta_memory import LiveBytes

# The tiny model: 2 layers, hidden 128 (4 query heads and 2 key-value heads of 32), MLP 256,
# a 1024-token vocabulary whose embedding is tied to the head.
TINY_PARAMETERS = 1024 * 128 + 2 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 256 + 2 * 128) + 128


def _shape(**changes: object) -> UpdateShape:
    base: dict[str, object] = {
        "key": "grpo",
        "finetune": "lora",
        "lora": LoraSettings(r=8),
        "dtype": "float32",
        "device": "cpu",
        "micro_batch_tokens": 512,
        "max_seq_len": 512,
        "logit_chunk_tokens": 128,
        "gradient_checkpointing": None,
    }
    return UpdateShape(**{**base, **changes})  # type: ignore[arg-type]


def _real_peak(tiny_dir: Path, shape: UpdateShape, tokens: int, *, checkpoint: bool) -> int:
    """Count the same step on real CPU tensors with the same counter."""
    torch.manual_seed(0)
    policy = prepare_policy(load_causal_lm(tiny_dir), shape)
    ids = torch.randint(0, 1000, (1, tokens))
    with LiveBytes() as live, update_mode(policy, dropout="lora", checkpoint=checkpoint):
        logprobs, _ = token_logprobs(
            policy,
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            rows=torch.zeros(tokens - 1, dtype=torch.long),
            positions=torch.arange(1, tokens),
            chunk_tokens=shape.logit_chunk_tokens,
        )
        logprobs.sum().backward()
        del logprobs
    return live.peak


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_planned_micro_batch_is_what_the_real_step_holds(tiny_dir: Path, finetune: str) -> None:
    """The meta dry run holds what the real step holds (fused attention, chunked head, grads)."""
    shape = _shape(finetune=finetune)
    plan = plan_update(shape, tiny_dir)
    (micro,) = plan.micro_batches
    assert micro.plain_bytes is not None and micro.checkpointed_bytes is not None
    for checkpoint, planned in ((False, micro.plain_bytes), (True, micro.checkpointed_bytes)):
        real = _real_peak(tiny_dir, shape, 512, checkpoint=checkpoint)
        assert abs(planned - real) <= 0.05 * real, (checkpoint, planned, real)
    # recomputing the layers in the backward holds less than keeping their activations
    assert micro.checkpointed_bytes < 0.8 * micro.plain_bytes


def test_parameters_optimizer_and_reference_are_counted(tiny_dir: Path) -> None:
    lora = plan_update(_shape(), tiny_dir, alternatives=False)
    # r x (inputs + outputs) for q, k, v, o, gate, up, down in both layers
    per_layer = 8 * ((128 + 128) * 2 + (128 + 64) * 2 + (128 + 256) * 2 + (256 + 128))
    assert lora.trained == 2 * per_layer
    assert lora.parameters == TINY_PARAMETERS + lora.trained
    assert lora.optimizer_bytes == 2 * 4 * lora.trained  # AdamW's two float32 moments
    assert lora.reference_bytes == 0
    full = plan_update(_shape(finetune="full", reference_copy=True), tiny_dir, alternatives=False)
    assert full.trained == full.parameters == TINY_PARAMETERS  # the tied head counted once
    assert full.reference_bytes == full.weights_bytes == 4 * TINY_PARAMETERS
    assert full.peak_bytes > full.weights_bytes + full.reference_bytes + full.optimizer_bytes
    bf16 = plan_update(_shape(dtype="bfloat16"), tiny_dir, alternatives=False)
    assert bf16.weights_bytes * 2 == lora.weights_bytes


def test_longest_sequence_is_planned_as_the_run_checkpoints_it(tiny_dir: Path) -> None:
    """Over the micro-batch budget a sequence forms its own micro-batch, checkpointed by default."""
    plan = plan_update(_shape(max_seq_len=2048), tiny_dir, alternatives=False)
    full, longest = plan.micro_batches
    assert (full.tokens, full.checkpointed) == (512, False)
    assert (longest.tokens, longest.checkpointed) == (2048, True)
    assert full.checkpointed_bytes is None and longest.plain_bytes is None  # not asked for
    assert longest.peak_bytes > full.peak_bytes
    never = plan_update(
        _shape(max_seq_len=2048, gradient_checkpointing=False), tiny_dir, alternatives=False
    )
    assert not never.micro_batches[1].checkpointed
    assert never.micro_batches[1].peak_bytes > longest.peak_bytes
    # None: the model's context (4096 for the tiny model)
    context = plan_update(_shape(max_seq_len=None), tiny_dir, alternatives=False)
    assert context.context == 4096 and context.micro_batches[-1].tokens == 4096


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_a_sharded_rank_plans_its_shard_and_the_units_it_gathers(
    tiny_dir: Path, finetune: str
) -> None:
    whole = plan_update(_shape(finetune=finetune), tiny_dir, alternatives=False)
    sharded = plan_update(
        _shape(finetune=finetune, ranks=4, sharded=True), tiny_dir, alternatives=False
    )
    # the tiny model: a 1024 x 128 embedding (tied head) and final norm in the root, two layers
    # (with their LoRA matrices, under LoRA)
    assert whole.parameters >= TINY_PARAMETERS
    layer = (whole.parameters - 1024 * 128 - 128) // 2
    assert sharded.gathered_bytes == 4 * (1024 * 128 + 128 + 2 * layer)
    assert sharded.weights_bytes == -(-whole.weights_bytes // 4) + sharded.gathered_bytes
    assert sharded.optimizer_bytes == -(-whole.optimizer_bytes // 4)
    assert sharded.stepping_bytes < whole.stepping_bytes
    assert whole.gathered_bytes == 0


def test_a_sharded_rank_plans_its_shard_of_the_kl_reference_copy(tiny_dir: Path) -> None:
    whole = plan_update(_shape(finetune="full", reference_copy=True), tiny_dir, alternatives=False)
    sharded = plan_update(
        _shape(finetune="full", reference_copy=True, ranks=4, sharded=True),
        tiny_dir,
        alternatives=False,
    )
    assert whole.reference_bytes == 4 * TINY_PARAMETERS
    assert sharded.reference_bytes == -(-whole.reference_bytes // 4)
