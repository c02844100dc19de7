"""Sharded updates (``data_parallel.strategy: fsdp``): the policy under PyTorch's FSDP2.

With ``fsdp`` every rank holds 1/``world_size`` of the policy's weights, gradients and AdamW
state (``fully_shard``: each decoder layer is one unit, the causal LM's embeddings, final norm
and LM head one more, the root), and gathers a unit's full weights only while it computes. The
step is the same as ``replicate``'s: rank 0 splits the batch by rollout, each rank runs forward
and backward on its part, the gradients are summed (FSDP2's reduce-scatter averages, so each
rank's loss is scaled by ``world_size``: ``gradient_scale``) and every rank steps its own shard.

Three things differ from ``replicate`` and live here:

- **lock step**: every forward and backward is a collective, so each rank runs as many
  micro-batches as the busiest one; a rank with less work runs ``lockstep_fillers`` empty ones
  (one pad token, zero loss weight);
- **what rank 0 alone did** (save the adapter or the weights to serve them, checkpoint, measure)
  now needs every rank: rank 0 runs such a function with ``everywhere``, which sends it to the
  others first. ``gather_trainable`` gathers the trained weights to rank 0's CPU (once per
  served policy); ``save_shards``/``load_shards`` write and read a distributed checkpoint
  (``torch.distributed.checkpoint``: each rank writes its own shard, so a resumed run may also
  use another number of ranks);
- ``shard`` turns an updater built as one process builds it into a sharded one (its model and a
  new optimizer over the shards, holding the optimizer state it had).

Torch is imported here, never by ``import fulmen``.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fulmen.algorithms.batching import TokenSample
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.algorithms.parallel.updater import Updater

__all__ = [
    "everywhere",
    "filler_sample",
    "gather_trainable",
    "gathered_weights",
    "gradient_scale",
    "is_sharded",
    "load_shards",
    "lockstep_fillers",
    "save_shards",
    "shard",
    "shard_writer",
    "sum_head_gradients",
]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _layers(causal_lm: nn.Module) -> nn.ModuleList:
    decoder = causal_lm.get_decoder()  # type: ignore[operator]
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ConfigError(
            f"data_parallel.strategy 'fsdp' shards a decoder's 'layers'; "
            f"{type(decoder).__name__} has none (use strategy 'replicate')"
        )
    return layers


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s causal LM is under FSDP2 (``shard`` was run on it)."""
    from torch.distributed.fsdp import FSDPModule

    from fulmen.algorithms.policy import causal_lm_of

    return isinstance(causal_lm_of(model), FSDPModule)


def everywhere(engine: Updater, function: Callable[..., Any], *args: Any) -> Any:
    """Run ``function(engine, *args)`` on every rank; return rank 0's result (rank 0 only).

    The other ranks are idle between steps, waiting for rank 0's next message: they get
    ``function``'s name and ``args`` (``parallel.workers.run_update_worker`` runs it on their
    engine), so the collectives inside ``function`` meet on every rank.
    """
    collective = engine.collective
    if collective is None or not collective.is_leader:
        raise ConfigError("everywhere() is rank 0's, with the ranks attached")
    name = f"{function.__module__}:{function.__qualname__}"
    collective.share([(name, args)] * collective.world_size, op="call")
    return function(engine, *args)


def run_call(engine: Updater, name: str, args: tuple[Any, ...]) -> None:
    """Run on a rank other than 0 the function rank 0 sent with ``everywhere``."""
    module, _, attribute = name.partition(":")
    getattr(importlib.import_module(module), attribute)(engine, *args)


def shard(engine: Updater, param_dtype: str | None, resume: str | None) -> None:
    """Put ``engine``'s policy under FSDP2 on every rank; a new optimizer keeps its state.

    Every rank starts from the same full weights and optimizer state (rank 0's, sent with
    ``build``); each keeps its shard of them. ``resume``: a checkpoint written by
    ``save_shards`` to load once sharded.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from fulmen.algorithms.policy import causal_lm_of

    model, trained = engine.model, engine.trained
    causal_lm = causal_lm_of(model)
    layers = _layers(causal_lm)
    held = get_optimizer_state_dict(trained, engine.optimizer) if engine.optimizer.state else None
    precision = MixedPrecisionPolicy(
        param_dtype=_DTYPES[param_dtype] if param_dtype else None,
        reduce_dtype=torch.float32,
    )
    _shard_causal_lm(causal_lm, layers, precision)
    for frozen in engine.frozen:  # a full fine-tune's KL reference: sharded alike, no optimizer
        copy = causal_lm_of(frozen)
        _shard_causal_lm(copy, _layers(copy), precision)
    # The algorithm's own modules (PPO's value head: a vector) stay whole on every rank; the
    # updater sums their gradients itself (``sum_head_gradients``).
    engine.optimizer = engine.new_optimizer()
    if held is not None:
        set_optimizer_state_dict(
            trained, engine.optimizer, held, options=StateDictOptions(full_state_dict=True)
        )
    if resume is not None:
        load_shards(engine, resume)


def _shard_causal_lm(causal_lm: nn.Module, layers: nn.ModuleList, precision: Any) -> None:
    """Make each decoder layer of ``causal_lm`` an FSDP2 unit and the LM itself the root."""
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    from fulmen.algorithms.policy import SHARDED_DECODER

    for layer in layers:
        fully_shard(layer, mp_policy=precision)
    # The root unit holds the embeddings, final norm and LM head. ``token_logprobs`` runs the
    # decoder and then reads the head's weight without calling the LM's forward, so the
    # decoder's call is registered as a forward of the root: FSDP2 gathers the root's weights
    # there and keeps a root's gathered until its backward, when the head's weight is read.
    fully_shard(causal_lm, mp_policy=precision)
    setattr(causal_lm, SHARDED_DECODER, functools.partial(causal_lm.get_decoder()))  # type: ignore[operator]
    register_fsdp_forward_method(causal_lm, SHARDED_DECODER)


def _reshard(model: nn.Module) -> None:
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def gather_trainable(engine: Updater) -> dict[str, torch.Tensor]:
    """Gather the trained weights, whole, to rank 0's CPU (``{}`` on the others); on every rank.

    One parameter at a time, so no rank ever holds more than one whole tensor beyond its shard
    (rank 0 keeps the gathered copies on its CPU).
    """
    from torch.distributed.tensor import DTensor

    model, collective = engine.model, engine.collective
    leader = collective is None or collective.is_leader
    _reshard(model)  # a root left gathered by a forward without backward
    gathered: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        whole = param.full_tensor() if isinstance(param, DTensor) else param
        if leader:
            gathered[name] = whole.detach().to("cpu", copy=True)
    return gathered


def _state(engine: Updater) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(ignore_frozen_params=True)
    weights, optimizer = get_state_dict(engine.trained, engine.optimizer, options=options)
    return {"model": weights, "optimizer": optimizer}


def save_shards(engine: Updater, directory: str) -> None:
    """Write every rank's shard of the trained weights and optimizer state to ``directory``.

    A distributed checkpoint (``torch.distributed.checkpoint``): each rank writes its own
    file, rank 0 the metadata once all are written. Frozen weights (a LoRA run's base) are
    not written: they come from the base model on resume.
    """
    from torch.distributed.checkpoint.state_dict_saver import save

    _reshard(engine.trained)
    save(_state(engine), checkpoint_id=directory)


def load_shards(engine: Updater, directory: str) -> None:
    """Load what ``save_shards`` wrote into every rank's shards (any number of ranks)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load

    _reshard(engine.trained)
    state = _state(engine)
    load(state, checkpoint_id=directory)
    set_state_dict(
        engine.trained,
        engine.optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
        # the frozen weights (a LoRA run's base) were not saved: they are the base model's
        options=StateDictOptions(ignore_frozen_params=True, strict=False),
    )


def shard_writer(engine: Updater) -> Callable[[Path], None] | None:
    """Return the writer of a sharded policy's distributed checkpoint (``None``: not sharded).

    Rank 0 passes it to ``checkpoint.save_checkpoint``, which calls it with the folder to fill:
    every rank then writes its shard there (``save_shards``).
    """
    if not is_sharded(engine.model):
        return None

    def write(folder: Path) -> None:
        everywhere(engine, save_shards, str(folder))

    return write


def gathered_weights(engine: Updater) -> dict[str, torch.Tensor] | None:
    """Return a sharded policy's trained weights gathered to rank 0 (``None``: not sharded)."""
    return everywhere(engine, gather_trainable) if is_sharded(engine.model) else None


def lockstep_fillers(engine: Updater, micro_batches: int) -> int:
    """How many empty micro-batches this rank adds to its ``micro_batches`` (0 unless sharded).

    Under FSDP2 each forward and backward gathers and reduces with the other ranks, so every
    rank must run as many as the busiest. This is a collective itself: call it before a
    rank's passes, where every rank calls it at the same point.
    """
    collective = engine.collective
    if collective is None or not is_sharded(engine.model):
        return 0
    return int(collective.max_value(float(micro_batches))) - micro_batches


def filler_sample(pad_token_id: int) -> TokenSample:
    """Return a micro-batch's worth of nothing: one trained pad token with zero loss weight."""
    return TokenSample(
        input_ids=[pad_token_id, pad_token_id],
        positions=[1],
        old_logprobs=[0.0],
        advantages=[0.0],
        norm=[0.0],
        rollout=-1,
    )


def sum_head_gradients(engine: Updater, heads: list[torch.Tensor]) -> None:
    """Sum over the ranks the gradients of modules held whole beside a sharded policy.

    FSDP2 reduced the policy's shards; ``heads`` (PPO's value head) are plain on every rank,
    their gradients from a loss scaled by ``gradient_scale``, so the sum is divided by it.
    """
    collective = engine.collective
    if collective is None or not heads:
        return
    collective.sum_gradients(heads)
    scale = gradient_scale(engine)
    for param in heads:
        if param.grad is not None:
            param.grad.div_(scale)


def gradient_scale(engine: Updater) -> float:
    """Return what a rank's loss is multiplied by so the reduced gradient is the batch's sum.

    FSDP2 averages gradients over the ranks (gloo has no pre-scaled sum to ask for instead);
    a loss already weighted for the whole batch needs the sum.
    """
    collective = engine.collective
    if collective is None or not is_sharded(engine.model):
        return 1.0
    return float(collective.world_size)
