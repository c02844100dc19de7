"""What an update needs in memory, planned before anything runs: a dry run on the meta device.

The parameters are counted from the model as the update builds it: the model is made on the
meta device (its shapes without storage, so planning a 32B model takes seconds and no memory)
and ``prepare_policy`` wraps it as the updater does (LoRA adapter or every weight trained).
AdamW's two moments and the gradients follow from the trained parameters. Activations are
not estimated by a formula: the update's own forward and backward (``token_logprobs`` over one
micro-batch, then ``backward``) run on meta tensors while a dispatch mode adds up the bytes of
every tensor an op returns and subtracts them when it is freed, so the peak covers whatever
the model's code keeps for the backward (its attention, norms, LoRA's inputs, the chunked LM
head's logits), with activation checkpointing or without, for any architecture transformers
builds. Two micro-batches are planned: a full one (``micro_batch_tokens``) and the longest
sequence the limit lets through (``max_seq_len``, the model's context by default), which forms
a micro-batch of its own.

Not modelled: ``autocast`` (planned as float32 matmuls, an upper bound), padding (every row is
planned full) and PPO's value head (one ``hidden x 1`` linear).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from torch import nn

    from fulmen.algorithms.lora import LoraSettings
    from fulmen.algorithms.parallel.config import DataParallelConfig

__all__ = ["MicroBatchMemory", "UpdateMemory", "UpdateShape", "UpdaterSettings", "plan_update"]

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclass(frozen=True)
class UpdateShape:
    """What the memory of an algorithm's update depends on, read from its config section.

    Attributes:
        key: the section's settings key (``grpo``, ``sft``, ``ppo``, ``dpo``), for messages.
        finetune: ``lora`` or ``full``.
        lora: the adapter shape (``lora`` only).
        dtype: parameter dtype.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        micro_batch_tokens: padded tokens per forward pass.
        max_seq_len: the longest sequence trained; ``None``: the model's context.
        logit_chunk_tokens: LM-head rows computed at once.
        gradient_checkpointing: ``True`` always, ``False`` never, ``None`` only for a
            micro-batch over ``micro_batch_tokens``.
        reference_copy: the update keeps a frozen copy of the weights (full fine-tuning with a
            KL penalty).
        ranks: data-parallel processes, each holding the whole model unless ``sharded``.
        sharded: the ranks shard weights, gradients and optimizer state (FSDP2,
            ``data_parallel.strategy: fsdp``): each holds 1/``ranks`` of them plus the units
            it has gathered (the root's embeddings and head, and two decoder layers: the one
            computing and the one prefetched).
    """

    key: str
    finetune: Literal["lora", "full"]
    lora: LoraSettings
    dtype: Literal["float32", "bfloat16"]
    device: str
    micro_batch_tokens: int
    max_seq_len: int | None
    logit_chunk_tokens: int
    gradient_checkpointing: bool | None
    reference_copy: bool = False
    ranks: int = 1
    sharded: bool = False

    #: planned without autocast, an upper bound (``prepare_policy`` reads it)
    autocast: None = None

    @classmethod
    def of(
        cls,
        key: str,
        settings: UpdaterSettings,
        *,
        reference_copy: bool = False,
        parallel: DataParallelConfig | None = None,
    ) -> UpdateShape:
        """Read the shape from an updater's settings (``GRPOConfig``, ``SFTConfig``, ...).

        ``parallel``: the stage's ``data_parallel`` settings (``None``: one process).
        """
        ranks = parallel.world_size if parallel is not None else 1
        return cls(
            key=key,
            finetune=settings.finetune,
            lora=settings.lora,
            dtype=settings.dtype,
            device=settings.device,
            micro_batch_tokens=settings.micro_batch_tokens,
            max_seq_len=settings.max_seq_len,
            logit_chunk_tokens=settings.logit_chunk_tokens,
            gradient_checkpointing=settings.gradient_checkpointing,
            reference_copy=reference_copy,
            ranks=ranks,
            sharded=parallel is not None and parallel.strategy == "fsdp",
        )


class UpdaterSettings(Protocol):
    """What :meth:`UpdateShape.of` reads from an updater's settings."""

    @property
    def finetune(self) -> Literal["lora", "full"]: ...  # noqa: D102
    @property
    def lora(self) -> LoraSettings: ...  # noqa: D102
    @property
    def dtype(self) -> Literal["float32", "bfloat16"]: ...  # noqa: D102
    @property
    def device(self) -> str: ...  # noqa: D102
    @property
    def micro_batch_tokens(self) -> int: ...  # noqa: D102
    @property
    def max_seq_len(self) -> int | None: ...  # noqa: D102
    @property
    def logit_chunk_tokens(self) -> int: ...  # noqa: D102
    @property
    def gradient_checkpointing(self) -> bool | None: ...  # noqa: D102


@dataclass(frozen=True)
class MicroBatchMemory:
    """The dry run of one micro-batch, with activation checkpointing and without.

    A peak is the most the forward and backward held at once beyond the parameters:
    activations, the chunked logits and the gradients the backward wrote.

    Attributes:
        tokens: its padded tokens (one row, every token after the first trained).
        checkpointed: whether the run checkpoints it (``gradient_checkpointing``).
        plain_bytes: the peak without checkpointing (``None``: not planned, the run does not
            run it that way and no alternative was asked for).
        checkpointed_bytes: the peak with it (``None`` likewise).
    """

    tokens: int
    checkpointed: bool
    plain_bytes: int | None
    checkpointed_bytes: int | None

    @property
    def peak_bytes(self) -> int:
        """The peak of the run as configured (always planned)."""
        peak = self.checkpointed_bytes if self.checkpointed else self.plain_bytes
        assert peak is not None
        return peak


@dataclass(frozen=True)
class UpdateMemory:
    """What one rank's update needs: parameters, optimizer state, and its micro-batches' peak.

    Attributes:
        shape: what was planned.
        parameters: every parameter (the adapter's included), counted once when tied.
        trained: the parameters the optimizer updates.
        weights_bytes: the parameters in ``shape.dtype`` (sharded: this rank's shard and the
            units it holds gathered at once).
        reference_bytes: the frozen copy of the weights (``shape.reference_copy``; sharded:
            this rank's shard of it), else 0.
        optimizer_bytes: AdamW's two moments per trained parameter (sharded: of its shard).
        step_bytes: what the optimizer step allocates on top while it runs (CPU: per
            parameter, so the largest trained tensor twice; CUDA's multi-tensor step: every
            trained parameter once).
        micro_batches: the full micro-batch, and the longest sequence when it is longer
            (sharded too, an upper bound: their backward's gradients are counted whole).
        context: the model's context (``max_seq_len``'s default).
        gathered_bytes: sharded, the whole weights of the units held gathered at once
            (included in ``weights_bytes``); else 0.
    """

    shape: UpdateShape
    parameters: int
    trained: int
    weights_bytes: int
    reference_bytes: int
    optimizer_bytes: int
    step_bytes: int
    micro_batches: tuple[MicroBatchMemory, ...]
    context: int
    gathered_bytes: int = 0

    @property
    def stepping_bytes(self) -> int:
        """What the optimizer step holds beyond the resident state: the gradients and its own."""
        shards = self.shape.ranks if self.shape.sharded else 1
        return self.step_bytes + -(-self.trained * _DTYPE_BYTES[self.shape.dtype] // shards)

    @property
    def peak_bytes(self) -> int:
        """The most one rank holds at once: everything resident plus its largest transient."""
        resident = self.weights_bytes + self.reference_bytes + self.optimizer_bytes
        transient = max(max(m.peak_bytes for m in self.micro_batches), self.stepping_bytes)
        return resident + transient


def plan_update(
    shape: UpdateShape, model_dir: str | Path, *, alternatives: bool = True
) -> UpdateMemory:
    """Plan ``shape``'s update of the model in ``model_dir`` (its ``config.json``) on meta.

    Nothing is allocated and no weight is read: only the config and the update's code run.
    ``alternatives`` also plans each micro-batch the other way (with activation checkpointing
    when the run goes without, and the reverse), which the advice on a plan that does not fit
    quotes; without it, only what the run does is planned (half the time).
    """
    from fulmen.algorithms.sequence_lengths import (
        FALLBACK_MAX_SEQ_LEN,
        is_checkpointed,
        model_context,
    )

    model = _meta_policy(shape, model_dir)
    params = {id(p): p for p in model.parameters()}.values()  # a tied head counted once
    trained = [p for p in params if p.requires_grad]
    width = _DTYPE_BYTES[shape.dtype]
    n_params = sum(p.numel() for p in params)
    n_trained = sum(p.numel() for p in trained)
    largest = max((p.numel() for p in trained), default=0) * width
    step = n_trained * width if shape.device.startswith("cuda") else 2 * largest
    context = model_context(model) or FALLBACK_MAX_SEQ_LEN
    longest = shape.max_seq_len or context
    lengths = [min(shape.micro_batch_tokens, longest)]
    if longest > shape.micro_batch_tokens:
        lengths.append(longest)
    micro: list[MicroBatchMemory] = []
    for n in lengths:
        chosen = is_checkpointed(
            shape.gradient_checkpointing, padded_tokens=n, budget=shape.micro_batch_tokens
        )
        peaks = {
            checkpoint: _dry_run(model, shape, n, checkpoint=checkpoint)
            if alternatives or checkpoint == chosen
            else None
            for checkpoint in (False, True)
        }
        micro.append(MicroBatchMemory(n, chosen, peaks[False], peaks[True]))
    weights = n_params * width
    shards = shape.ranks if shape.sharded else 1
    gathered = _gathered_units(model) * width if shape.sharded else 0
    return UpdateMemory(
        shape=shape,
        parameters=n_params,
        trained=n_trained,
        weights_bytes=-(-weights // shards) + gathered,
        # sharded like the policy; gathered only during its own forward, when the policy's
        # root is not (a reference pass runs before the policy's forward)
        reference_bytes=-(-weights // shards) if shape.reference_copy else 0,
        optimizer_bytes=-(-2 * n_trained * width // shards),
        step_bytes=-(-step // shards),
        micro_batches=tuple(micro),
        context=context,
        gathered_bytes=gathered,
    )


def _gathered_units(model: nn.Module) -> int:
    """Parameters a sharded rank holds whole at once: the root unit and two decoder layers."""
    from fulmen.algorithms.policy import causal_lm_of

    layers = getattr(causal_lm_of(model).get_decoder(), "layers", None) or []
    in_layers: set[int] = set()
    largest = 0
    for layer in layers:
        own = {id(p): p.numel() for p in layer.parameters()}
        in_layers.update(own)
        largest = max(largest, sum(own.values()))
    root = sum({id(p): p.numel() for p in model.parameters() if id(p) not in in_layers}.values())
    return root + 2 * largest


def _meta_policy(shape: UpdateShape, model_dir: str | Path) -> nn.Module:
    """Build the model on the meta device and prepare it as the updater does."""
    from dataclasses import replace

    import torch

    from fulmen.algorithms.policy import prepare_policy
    from fulmen.meta_memory import meta_causal_lm

    model = meta_causal_lm(model_dir, dtype=getattr(torch, shape.dtype))
    # checkpointing made available, so each micro-batch is planned with it and without
    available = replace(shape, device="meta", gradient_checkpointing=None)
    return prepare_policy(model, available)


def _dry_run(model: nn.Module, shape: UpdateShape, tokens: int, *, checkpoint: bool) -> int:
    """Run one micro-batch of ``tokens`` (every one trained) forward and backward on meta."""
    import torch

    from fulmen.algorithms.policy import token_logprobs, update_mode
    from fulmen.meta_memory import LiveBytes

    ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
    mask = torch.ones(1, tokens, dtype=torch.long, device="meta")
    positions = torch.arange(1, tokens, device="meta")
    rows = torch.zeros(tokens - 1, dtype=torch.long, device="meta")
    with LiveBytes() as live, update_mode(model, dropout="lora", checkpoint=checkpoint):
        logprobs, _ = token_logprobs(
            model,
            input_ids=ids,
            attention_mask=mask,
            rows=rows,
            positions=positions,
            chunk_tokens=shape.logit_chunk_tokens,
        )
        logprobs.sum().backward()
        del logprobs
    for p in model.parameters():  # the gradients were counted; the next run starts without
        p.grad = None
    return live.peak
