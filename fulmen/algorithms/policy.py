"""The policy model: loading (transformers + peft), and token logprobs where the loss needs them.

``token_logprobs`` runs the decoder for hidden states, gathers the hidden state *before* each
trained token, and applies the LM head only to those rows, in chunks. With a 262k-token
vocabulary (Gemma 3) the head over every position costs more than the rest of the model on a
CPU; prompts and observation tokens never need logits. When the targets span several chunks,
each chunk's logits are recomputed in backward (activation checkpointing), so only one chunk of
vocabulary-sized activations is alive; a single chunk keeps its logits (no recompute).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from fulmen.algorithms.lora import LoraSettings
from fulmen.algorithms.stopping import check_stop, watch_layers
from fulmen.errors import ConfigError

__all__ = [
    "SHARDED_DECODER",
    "PolicySettings",
    "ReferencePolicy",
    "autocast_context",
    "causal_lm_of",
    "hidden_states",
    "load_adapter_weights",
    "load_causal_lm",
    "load_stage_policy",
    "merge_adapter",
    "policy_device",
    "prepare_policy",
    "token_logprobs",
    "update_mode",
]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class PolicySettings(Protocol):
    """What ``prepare_policy`` reads from an algorithm's config (``GRPOConfig``, ``SFTConfig``)."""

    @property
    def finetune(self) -> Literal["lora", "full"]:
        """``lora`` trains an adapter; ``full`` trains every weight."""
        ...

    @property
    def lora(self) -> LoraSettings:
        """The adapter shape for ``finetune="lora"``."""
        ...

    @property
    def dtype(self) -> Literal["float32", "bfloat16"]:
        """Parameter dtype of the policy."""
        ...

    @property
    def gradient_checkpointing(self) -> bool | None:
        """Recompute decoder activations in backward to save memory (``None``: by length)."""
        ...

    @property
    def device(self) -> str:
        """Where the policy trains: ``cpu``, ``cuda`` or ``cuda:N``."""
        ...

    @property
    def autocast(self) -> Literal["bfloat16"] | None:
        """Run the forward's matmuls in this dtype (weights stay in ``dtype``); ``None``: off."""
        ...


def policy_device(config: PolicySettings) -> torch.device:
    """Return the torch device ``config.device`` names, checked to exist on this machine.

    Raises:
        ConfigError: a CUDA device is asked for where torch sees no such GPU.
    """
    device = torch.device(config.device)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index or 0
        if index >= count:
            raise ConfigError(
                f"device {config.device!r}: torch sees {count} CUDA device(s) here "
                f"(torch {torch.__version__}); use device: cpu"
            )
    return device


def autocast_context(config: PolicySettings) -> AbstractContextManager[Any]:
    """``torch.autocast`` for the policy's forward when ``config.autocast`` is set.

    The parameters (LoRA's included: they are the master weights the optimizer updates) stay
    in ``config.dtype``; matmuls run in bfloat16, which CPUs with AMX or AVX512-BF16 and GPUs
    run faster. Logits are still taken in float32 by ``token_logprobs``.
    """
    if config.autocast is None:
        return nullcontext()
    return torch.autocast(policy_device(config).type, dtype=_DTYPES[config.autocast])


def load_causal_lm(path: str | Path, *, dtype: str = "float32") -> nn.Module:
    """Load a Hugging Face causal LM from a local directory (nothing is downloaded)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        str(path), dtype=_DTYPES[dtype], local_files_only=True
    )


def prepare_policy(
    model: nn.Module, config: PolicySettings, *, adapter_name: str = "default"
) -> nn.Module:
    """Cast ``model``, move it to the config's device, make only trained parameters need grad.

    LoRA wraps the model with a peft adapter named ``adapter_name``; an already wrapped model
    is kept, and gets that adapter added when it lacks it (one adapter per role on one base,
    ``fulmen.algorithms.grpo.roles``). Full fine-tuning trains every parameter. The model
    attends with :mod:`fulmen.attention`'s blockwise attention (what the built-in engine runs:
    long sequences without a ``[tokens x tokens]`` tensor), and its layers check for a stop
    request (:mod:`fulmen.algorithms.stopping`). Activation checkpointing is made available
    unless ``gradient_checkpointing`` is ``False``; ``update_mode`` turns it on per
    micro-batch.
    """
    _use_blockwise_attention(model)
    model = model.to(device=policy_device(config), dtype=_DTYPES[config.dtype])
    if config.finetune == "lora":
        from peft import LoraConfig, PeftModel, get_peft_model

        lora = config.lora
        target = lora.target_modules
        settings = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,  # type: ignore[arg-type]  # peft annotates int, uses float
            lora_dropout=lora.dropout,
            target_modules=target if isinstance(target, str) else list(target),
            bias="none",
            task_type="CAUSAL_LM",
        )
        with warnings.catch_warnings():
            # peft reads a transformers attribute deprecated in transformers 5.
            warnings.filterwarnings("ignore", category=FutureWarning)
            if not isinstance(model, PeftModel):
                model = get_peft_model(
                    model,  # type: ignore[arg-type]
                    settings,
                    adapter_name=adapter_name,
                )
            elif adapter_name not in model.peft_config:
                model.add_adapter(adapter_name, settings)
    else:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
    watch_layers(model)
    if config.gradient_checkpointing is not False:
        causal_lm = causal_lm_of(model)
        # transformers 5 renamed gradient_* to activation_* (the old name warns).
        enable = getattr(causal_lm, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            causal_lm.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    return model


def _use_blockwise_attention(model: nn.Module) -> None:
    """Switch a transformers model to blockwise attention (a no-op for other modules)."""
    from fulmen.attention import register

    causal_lm = causal_lm_of(model)
    name = register()
    setter = getattr(causal_lm, "set_attn_implementation", None)
    config = getattr(causal_lm, "config", None)
    if callable(setter) and getattr(config, "_attn_implementation", name) != name:
        setter(name)


def load_adapter_weights(
    model: nn.Module, adapter_dir: str | Path, *, adapter_name: str = "default"
) -> None:
    """Set a LoRA policy's adapter ``adapter_name`` from a saved peft adapter directory.

    This is how a stage starts from the adapter an earlier stage published: the policy keeps
    its own optimizer, but its adapter starts where the other one ended. The adapter must have
    the policy's shape (rank, target modules).

    Raises:
        ConfigError: ``model`` is not a LoRA policy, the directory holds no adapter, or the
            adapter's shape differs from the policy's (the message names both).
    """
    from peft import PeftModel, set_peft_model_state_dict
    from safetensors.torch import load_file

    source = Path(adapter_dir) / "adapter_model.safetensors"
    if not isinstance(model, PeftModel):
        raise ConfigError(f"cannot start from adapter {adapter_dir}: the policy is not LoRA")
    if not source.is_file():
        raise ConfigError(f"cannot start from adapter {adapter_dir}: no {source.name} there")
    weights = load_file(str(source))
    try:
        result = set_peft_model_state_dict(model, weights, adapter_name=adapter_name)
    except RuntimeError as exc:  # torch's size mismatch
        raise ConfigError(
            f"adapter {adapter_dir} does not fit this policy's LoRA shape: {exc}"
        ) from exc
    # other adapters of a per-role policy are missing by design: only this one's count
    missing = [k for k in result.missing_keys if "lora_" in k and f".{adapter_name}." in k]
    if missing or result.unexpected_keys:
        raise ConfigError(
            f"adapter {adapter_dir} does not fit this policy's LoRA settings (rank, target "
            "modules)",
            detail={"missing": missing[:5], "unexpected": list(result.unexpected_keys)[:5]},
        )


def merge_adapter(model: nn.Module, adapter_dir: str | Path) -> nn.Module:
    """Return ``model`` with the saved peft LoRA adapter at ``adapter_dir`` merged into it.

    A full-weight stage that follows a LoRA stage starts here: the engine served the base plus
    that adapter, so every weight starts from their sum.

    Raises:
        ConfigError: the directory holds no peft adapter.
    """
    from peft import PeftModel

    source = Path(adapter_dir)
    if not (source / "adapter_config.json").is_file():
        raise ConfigError(f"cannot merge adapter {adapter_dir}: no adapter_config.json there")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)  # as in prepare_policy
        wrapped = PeftModel.from_pretrained(model, str(source))  # type: ignore[arg-type]
    return wrapped.merge_and_unload()  # type: ignore[operator]


def load_stage_policy(
    base: str | Path,
    *,
    dtype: str,
    finetune: str,
    weights: Path | None,
    adapter: Path | None,
) -> nn.Module:
    """Load the causal LM a stage of a run trains, before ``prepare_policy``.

    It starts from ``weights`` (the full-weight model an earlier round or stage published and
    the engine serves) when set, else from ``base``. With ``finetune="full"`` the ``adapter``
    the engine serves on top is merged in; a LoRA policy loads it after wrapping instead
    (``load_adapter_weights``).
    """
    model = load_causal_lm(weights or base, dtype=dtype)
    if finetune == "full" and adapter is not None:
        model = merge_adapter(model, adapter)
    return model


@contextmanager
def update_mode(
    model: nn.Module, *, dropout: Literal["lora", "all"], checkpoint: bool = True
) -> Iterator[None]:
    """Put ``model`` in the mode of a training forward *and backward*; eval mode after.

    ``checkpoint`` (when ``prepare_policy`` made checkpointing available) recomputes the
    layers' activations in the backward; ``False`` keeps them (faster, for short batches).

    The mode must hold through ``backward()``: activation checkpointing recomputes the forward
    there, and a recompute in another mode (dropout on in the forward, off in the recompute)
    saves other tensors, which torch refuses (``CheckpointError``). ``dropout="all"`` is plain
    train mode (SFT: the model's and the adapter's dropout, as in any fine-tuning).
    ``dropout="lora"`` keeps everything in eval except the flags the config asked for: LoRA's
    dropout and the layers HF checkpoints only in train mode, so the base model's own dropout
    (attention dropout, say) stays off and GRPO's logprobs still match the sampler's.
    """
    if dropout == "all":
        model.train()
        for module in model.modules():  # HF checkpoints a layer only in training mode
            if getattr(module, "gradient_checkpointing", False) is True:
                module.training = checkpoint  # the flag alone: not the layer's children
    else:
        model.eval()
        for module in model.modules():
            if checkpoint and getattr(module, "gradient_checkpointing", False) is True:
                module.training = True  # the flag alone: not the layer's children
            lora_dropout = getattr(module, "lora_dropout", None)
            if isinstance(lora_dropout, nn.ModuleDict):
                lora_dropout.train()
    try:
        yield
    finally:
        model.eval()


def prepare_seeded_policy(
    model: nn.Module, config: PolicySettings, *, seed: int, adapter_name: str = "default"
) -> nn.Module:
    """Run :func:`prepare_policy` with its adapter initialized from ``seed``, in eval mode.

    The caller's random state is left as it was (the seed fixes only the adapter's
    initialization); the update's training flags are set only inside an update
    (:func:`update_mode`).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        prepared = prepare_policy(model, config, adapter_name=adapter_name)
    prepared.eval()
    return prepared


def pad_token_of(model: nn.Module) -> int:
    """Return the pad token id the model's config names (0 when it names none)."""
    return getattr(causal_lm_of(model).config, "pad_token_id", None) or 0


def causal_lm_of(model: nn.Module) -> Any:
    """Return the transformers ``*ForCausalLM`` inside ``model`` (unwraps a peft model)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


class ReferencePolicy:
    """The reference for the KL penalty: the base without the LoRA adapter, or a frozen copy."""

    def __init__(self, policy: nn.Module, *, finetune: str) -> None:
        self._policy = policy
        self._copy: nn.Module | None = None
        if finetune == "full":
            self._copy = copy.deepcopy(policy).eval().requires_grad_(False)

    @property
    def frozen_copy(self) -> nn.Module | None:
        """The frozen copy of a full fine-tune's starting weights; ``None`` with LoRA."""
        return self._copy

    @contextmanager
    def active(self) -> Iterator[nn.Module]:
        """Yield a module that computes reference logprobs (no grad needed).

        A sharded copy (``parallel.sharding``) gives its gathered root back after each use:
        FSDP2 keeps a root gathered until a backward, which a reference never runs.
        """
        if self._copy is not None:
            yield self._copy
            from torch.distributed.fsdp import FSDPModule

            root = causal_lm_of(self._copy)
            if isinstance(root, FSDPModule):
                root.reshard()
            return
        with self._policy.disable_adapter():  # type: ignore[operator]
            yield self._policy


#: The attribute of a sharded causal LM (``fulmen.algorithms.parallel.sharding``) that runs its
#: decoder as a forward of the FSDP2 root, which gathers the embeddings and the head.
SHARDED_DECODER = "fulmen_sharded_decoder"


def hidden_states(model: nn.Module, *, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Return the decoder's last hidden states ``[B, L, H]`` (before the LM head).

    ``token_logprobs(..., hidden=...)`` takes them, so a loss that also reads the hidden states
    (PPO's value head) runs the decoder once.
    """
    causal_lm = causal_lm_of(model)
    decoder = getattr(causal_lm, SHARDED_DECODER, None) or causal_lm.get_decoder()
    return decoder(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False
    ).last_hidden_state


def token_logprobs(
    model: nn.Module,
    *,
    input_ids: Tensor,
    attention_mask: Tensor,
    rows: Tensor,
    positions: Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    with_entropy: bool = False,
    hidden: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Logprob of ``input_ids[rows, positions]`` given the tokens before it, per target token.

    Args:
        model: a causal LM, or a peft model wrapping one.
        input_ids: ``[B, L]`` right-padded token ids.
        attention_mask: ``[B, L]`` 1 for real tokens.
        rows: ``[N]`` batch row of each target token.
        positions: ``[N]`` sequence position of each target token (>= 1).
        temperature: divide logits by it, as the sampler did.
        chunk_tokens: LM-head rows per chunk.
        with_entropy: also return the per-token entropy of the policy (detached).
        hidden: ``model``'s ``hidden_states`` of this batch when the caller already has them
            (the decoder is not run again); ``None``: run it.

    Returns:
        ``([N] logprobs, [N] entropies or None)``.
    """
    if rows.shape != positions.shape or rows.ndim != 1:
        raise ConfigError(f"rows {tuple(rows.shape)} and positions {tuple(positions.shape)} differ")
    # meta tensors (the memory plan's dry run, fulmen.algorithms.update_memory) hold no values
    if positions.numel() and positions.device.type != "meta" and int(positions.min()) < 1:
        raise ConfigError("target positions must be >= 1 (position 0 has no context)")
    causal_lm = causal_lm_of(model)
    if hidden is None:
        hidden = hidden_states(model, input_ids=input_ids, attention_mask=attention_mask)
    selected = hidden[rows, positions - 1]
    targets = input_ids[rows, positions]
    head = _float32_head(causal_lm.get_output_embeddings())
    softcap = getattr(causal_lm.config, "final_logit_softcapping", None)
    logprobs: list[Tensor] = []
    entropies: list[Tensor] = []
    # One chunk keeps its logits for backward; several are recomputed there, one at a time.
    recompute = torch.is_grad_enabled() and int(targets.shape[0]) > chunk_tokens
    for start in range(0, int(targets.shape[0]), chunk_tokens):
        check_stop()
        h = selected[start : start + chunk_tokens]
        t = targets[start : start + chunk_tokens]
        if recompute:
            lp, ent = checkpoint(
                _head_logprobs, head, h, t, softcap, temperature, use_reentrant=False
            )
        else:
            lp, ent = _head_logprobs(head, h, t, softcap, temperature)
        logprobs.append(lp)
        entropies.append(ent)
    if not logprobs:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    entropy = torch.cat(entropies) if with_entropy else None
    return torch.cat(logprobs), entropy


class _Float32Head(nn.Module):
    """The LM head as a float32 linear map, whatever the policy's dtype and autocast.

    bfloat16 logits have a step of 0.06 near 10, which biased some tokens' logprobs: GRPO's
    clipped ratio then drove calc's policy into repeating one of them (under autocast), and a
    ``dtype: bfloat16`` policy's logprobs were off by up to 0.064 against a float32 head on the
    same hidden states. The weight is cast once per ``token_logprobs`` call (a copy only when
    it is not float32 already); gradients still reach it when it is trained.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.weight32 = weight.float()
        self.bias32 = None if bias is None else bias.float()

    def forward(self, hidden: Tensor) -> Tensor:
        with _autocast_off(hidden.device.type):
            return torch.nn.functional.linear(hidden.float(), self.weight32, self.bias32)


def _autocast_off(device: str) -> AbstractContextManager[Any]:
    """Turn autocast off on ``device`` (torch has no autocast for ``meta``: a no-op there)."""
    return nullcontext() if device == "meta" else torch.autocast(device, enabled=False)


def _float32_head(head: nn.Module) -> nn.Module:
    """Return ``head`` computing in float32: a plain linear head is wrapped, others kept.

    A head with its own LoRA adapter (``target_modules`` naming ``lm_head``) is not a plain
    ``nn.Linear``; it runs as it is, its output cast to float32.
    """
    if type(head) is nn.Linear:
        return _Float32Head(head.weight, head.bias)
    return head


def _head_logprobs(
    head: nn.Module, hidden: Tensor, targets: Tensor, softcap: float | None, temperature: float
) -> tuple[Tensor, Tensor]:
    device = hidden.device.type
    if isinstance(head, _Float32Head) or not torch.is_autocast_enabled(device):
        logits = head(hidden).float()
    else:  # a head with its own adapter: out of autocast, on float32 input
        with _autocast_off(device):
            logits = head(hidden.float()).float()
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)
    return log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy
