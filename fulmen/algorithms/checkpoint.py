"""Saving and restoring a trained policy: resumable checkpoints, LoRA adapters, full models.

Shared by every weight-training algorithm (``GRPOUpdater``, ``SFTUpdater``): a checkpoint holds
the trainable parameters, the optimizer and torch RNG state, and a small JSON state the
updater chooses (``updater.json``: its step, its policy version, its config). An adapter or
model whose trained weights hold a NaN or an infinity is never written for serving
(``save_adapter``, ``save_model``): the engine would serve garbage under a new version.
Torch, safetensors and peft are imported here, never by ``import fulmen``.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

import torch
from torch import nn

from fulmen.algorithms.optimizer import OptimizerSettings, build_optimizer
from fulmen.algorithms.parallel.updater import PolicyUpdater
from fulmen.algorithms.policy import (
    PolicySettings,
    causal_lm_of,
    load_adapter_weights,
    load_stage_policy,
    pad_token_of,
    policy_device,
    prepare_seeded_policy,
)
from fulmen.algorithms.sequence_lengths import resolve_max_seq_len
from fulmen.errors import ConfigError, FulmenError

if TYPE_CHECKING:
    from fulmen.algorithms.context import AlgorithmContext
    from fulmen.algorithms.parallel.collective import Collective
    from fulmen.algorithms.parallel.updater import Updater

_C = TypeVar("_C", bound="HeldPolicySettings")
_U = TypeVar("_U", bound="UpdaterFiles[Any]")
_log = logging.getLogger("fulmen.train")

__all__ = [
    "HeldPolicySettings",
    "UpdaterFiles",
    "check_finite",
    "SHARDS_DIR",
    "load_checkpoint",
    "lora_updater_for_stage",
    "restore_checkpoint",
    "save_adapter",
    "save_checkpoint",
    "save_model",
    "sharded_checkpoint",
]

_TRAINABLE_FILE = "trainable.safetensors"
_OPTIMIZER_FILE = "optimizer.pt"
_STATE_FILE = "updater.json"
#: The distributed checkpoint of a sharded policy, inside a checkpoint directory.
SHARDS_DIR = "shards"
# What checkpoints written before the rename call it (the updater's state, not an engine's):
# still read, so a run checkpointed by an older fulmen resumes.
_OLD_STATE_FILE = "engine.json"


def check_finite(model: nn.Module, weights: Mapping[str, torch.Tensor] | None = None) -> None:
    """Raise when a trained parameter of ``model`` holds a NaN or an infinity.

    ``weights``: the trained weights gathered from a sharded policy (checked instead of the
    model's own shards).

    Raises:
        FulmenError: names how many trained tensors are not finite and the first of them.
    """
    if weights is None:
        weights = {n: p for n, p in model.named_parameters() if p.requires_grad}
    bad = [name for name, p in weights.items() if not bool(torch.isfinite(p).all())]
    if bad:
        raise FulmenError(
            f"{len(bad)} trained weight tensor(s) hold NaN or inf (first: {bad[0]}); the policy "
            "is not saved for serving. A loss term or reward was not finite: see the step's "
            "metrics (grad_norm, skipped_nonfinite)",
            detail={"parameters": bad[:10]},
        )


def save_checkpoint(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    directory: str | Path,
    *,
    state: dict[str, Any],
    shards: Callable[[Path], None] | None = None,
) -> Path:
    """Write trainable weights, optimizer and RNG state, and ``state`` to ``directory``.

    The files are written to a sibling staging folder first and moved into place, so an
    interrupted save never leaves a half-written checkpoint under ``directory``. ``shards``:
    a sharded policy's writer of its distributed checkpoint (``parallel.sharding``), called
    with the folder it writes to instead of the trainable weights and optimizer files.
    """
    from safetensors.torch import save_file

    target = Path(directory)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if shards is not None:
        shards(staging / SHARDS_DIR)
        torch.save({"rng": torch.get_rng_state()}, staging / _OPTIMIZER_FILE)
        (staging / _STATE_FILE).write_text(json.dumps(state, indent=2), encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        return target
    trainable = {
        name: p.detach().cpu().contiguous()
        for name, p in model.named_parameters()
        if p.requires_grad
    }
    save_file(trainable, str(staging / _TRAINABLE_FILE))
    torch.save(
        {"optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()},
        staging / _OPTIMIZER_FILE,
    )
    (staging / _STATE_FILE).write_text(json.dumps(state, indent=2), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def load_checkpoint(
    model: nn.Module, optimizer: torch.optim.Optimizer, directory: str | Path
) -> dict[str, Any]:
    """Restore what ``save_checkpoint`` wrote and return its ``state``.

    Raises:
        ConfigError: ``directory`` is not a checkpoint, or its trainable parameter names do
            not match the model's.
    """
    from safetensors.torch import load_file

    source = Path(directory)
    state_file = _state_file(source)
    weights = load_file(str(source / _TRAINABLE_FILE))
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(weights) != set(params):
        missing = sorted(set(params) - set(weights))[:5]
        extra = sorted(set(weights) - set(params))[:5]
        raise ConfigError(
            f"checkpoint {source} does not fit this policy",
            detail={"missing": missing, "unexpected": extra},
        )
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
    saved = torch.load(source / _OPTIMIZER_FILE, weights_only=True)
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["rng"])
    return json.loads(state_file.read_text(encoding="utf-8"))


def _state_file(source: Path) -> Path:
    found = next(
        (source / n for n in (_STATE_FILE, _OLD_STATE_FILE) if (source / n).is_file()), None
    )
    if found is None:
        raise ConfigError(f"{source} is not a checkpoint (no {_STATE_FILE})")
    return found


def sharded_checkpoint(directory: str | Path) -> Path | None:
    """Return the distributed checkpoint inside ``directory`` (a sharded policy's), or ``None``."""
    shards = Path(directory) / SHARDS_DIR
    return shards if shards.is_dir() else None


def restore_checkpoint(
    model: nn.Module, optimizer: torch.optim.Optimizer, directory: str | Path
) -> tuple[dict[str, Any], Path | None]:
    """Restore a checkpoint and return its ``state`` and its shards (``None``: not sharded).

    A sharded policy's checkpoint (``SHARDS_DIR``) restores only the RNG state here: every
    rank loads the weights and optimizer state once the policy is sharded
    (``parallel.sharding.load_shards``), from the returned folder. Any other is
    ``load_checkpoint``.
    """
    shards = sharded_checkpoint(directory)
    if shards is None:
        return load_checkpoint(model, optimizer, directory), None
    source = Path(directory)
    saved = torch.load(source / _OPTIMIZER_FILE, weights_only=True)
    torch.set_rng_state(saved["rng"])
    return json.loads(_state_file(source).read_text(encoding="utf-8")), shards


def save_adapter(
    model: nn.Module,
    directory: str | Path,
    *,
    finetune: str,
    adapter_name: str = "default",
    weights: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Write LoRA adapter ``adapter_name`` in peft's format, ready for ``/v1/load_lora_adapter``.

    peft writes a named adapter other than ``default`` into a subfolder of that name; its
    files are moved up, so every adapter directory looks the same to the engine. ``weights``:
    the trained weights gathered from a sharded policy (``parallel.sharding``), written
    instead of the model's own shards.
    """
    if finetune != "lora":
        raise ConfigError("save_adapter needs finetune='lora'; use save_model for full weights")
    check_finite(model, weights)
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    extra = {} if weights is None else {"state_dict": dict(weights)}
    model.save_pretrained(str(target), selected_adapters=[adapter_name], **extra)  # type: ignore[operator]
    nested = target / adapter_name
    if adapter_name != "default" and nested.is_dir():
        for item in nested.iterdir():
            item.replace(target / item.name)
        nested.rmdir()
    return target


def save_model(
    model: nn.Module,
    directory: str | Path,
    *,
    finetune: str,
    weights: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Write the full policy (LoRA merged into a copy of the weights) as a HF directory.

    ``weights``: a sharded full fine-tune's weights gathered to this rank
    (``parallel.sharding``), written instead of the model's own shards.
    """
    check_finite(model, weights)
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    if weights is not None:
        if finetune == "lora":
            raise ConfigError("a sharded LoRA policy is served as an adapter, not merged")
        causal_lm_of(model).save_pretrained(str(target), state_dict=dict(weights))
        return target
    if finetune == "lora":
        merged = copy.deepcopy(model).merge_and_unload()  # type: ignore[operator]
        merged.save_pretrained(str(target))
    else:
        causal_lm_of(model).save_pretrained(str(target))
    return target


class HeldPolicySettings(PolicySettings, OptimizerSettings, Protocol):
    """What ``UpdaterFiles`` reads of an updater's settings (a pydantic model)."""

    @property
    def max_seq_len(self) -> int | None:
        """The length limit (``None``: the model's context)."""
        ...

    @property
    def seed(self) -> int | None:
        """The adapter's initial seed (the run's, once ``update_config`` completed it)."""
        ...

    def model_dump(self, *, mode: str) -> dict[str, Any]:
        """Return the settings as a mapping (a checkpoint records them)."""
        ...


class UpdaterFiles(PolicyUpdater, Generic[_C]):
    """The files of an updater: its checkpoint and the policy it serves (every algorithm's).

    The updater provides ``model`` (its policy), ``optimizer``, ``config`` (a pydantic
    model) and ``step``; ``trained`` names what the optimizer trains and a checkpoint holds
    (the policy, or the policy with the algorithm's own trained modules, such as PPO's value
    head). ``config.finetune`` says whether a LoRA adapter (named ``adapter_name``) or every
    weight is trained and served. A sharded policy (``parallel.sharding``) checkpoints as a
    distributed checkpoint and serves its weights gathered to rank 0.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    config: _C
    step: int
    #: The peft adapter the updater trains (several GRPO roles share one base).
    adapter_name: str = "default"

    def _hold_policy(self, model: nn.Module, config: _C) -> None:
        """Set what an updater holds, from ``model`` and ``config``.

        ``config``, the adapter on ``model`` (seeded with ``config.seed``), the device, the
        optimizer, the pad token, the length limit (the configured one, else the model's
        context), the step, the skipped-step count and (none yet) the data-parallel group.
        """
        self.config = config
        self.model = prepare_seeded_policy(model, config, seed=config.seed or 0)
        self.device = policy_device(config)
        self.optimizer = build_optimizer(self.model, config)
        self.pad_token_id = pad_token_of(self.model)
        self.max_seq_len = resolve_max_seq_len(config.max_seq_len, self.model)
        self.step = 0
        #: Optimizer steps skipped because the gradient norm was not finite.
        self.skipped_nonfinite = 0
        #: The data-parallel group this updater trains with (``None``: this process alone).
        self.collective: Collective | None = None
        #: A sharded checkpoint to load once the ranks shard the policy (``parallel.sharding``).
        self.resume_shards: Path | None = None

    def save_checkpoint(self, directory: str | Path) -> Path:
        """Write the trained parameters, the optimizer and RNG state and the step."""
        from fulmen.algorithms.parallel import sharding

        state = {"step": self.step, "config": self.config.model_dump(mode="json")}
        return save_checkpoint(
            self.trained,
            self.optimizer,
            directory,
            state=state,
            shards=sharding.shard_writer(cast("Updater", self)),  # its updater is one
        )

    def load_checkpoint(self, directory: str | Path) -> None:
        """Restore what ``save_checkpoint`` wrote (a sharded one once the ranks shard)."""
        state, self.resume_shards = restore_checkpoint(self.trained, self.optimizer, directory)
        self.step = int(state["step"])

    @property
    def is_full(self) -> bool:
        """Whether every weight is trained (``finetune: full``) rather than a LoRA adapter."""
        return self.config.finetune == "full"

    def save_adapter(self, directory: str | Path) -> Path:
        """Write the LoRA adapter in peft's format, ready for ``/v1/load_lora_adapter``."""
        from fulmen.algorithms.parallel import sharding

        return save_adapter(
            self.model,
            directory,
            finetune=self.config.finetune,
            adapter_name=self.adapter_name,
            weights=sharding.gathered_weights(cast("Updater", self)),
        )

    def save_model(self, directory: str | Path) -> Path:
        """Write the whole policy (LoRA merged into a copy) as a HF directory (reloadable)."""
        from fulmen.algorithms.parallel import sharding

        return save_model(
            self.model,
            directory,
            finetune=self.config.finetune,
            weights=sharding.gathered_weights(cast("Updater", self)),
        )


def lora_updater_for_stage(
    updater: Callable[..., _U], section: Any, context: AlgorithmContext, *, name: str
) -> _U:
    """Build a LoRA updater for the stage ``context`` runs, where the stage's progress left it.

    ``section`` is the stage's config: its ``update_config(seed=...)`` (with the run's seed)
    sets the updater, ``updater(model, config=settings)``, around the stage's base weights in
    the settings' ``dtype``; a checkpoint of this stage is restored (a resumed run), else an
    adapter a previous stage published is loaded into the new adapter.
    """
    settings = section.update_config(seed=context.run.seed)
    progress, policy = context.progress, context.policy
    model = load_stage_policy(
        context.run.model_path,
        dtype=settings.dtype,
        finetune="lora",
        weights=policy.weights,
        adapter=None,
    )
    built = updater(model, config=settings)
    if progress.checkpoint is not None:
        _log.info("resuming %s after step %d from %s", name, progress.step, progress.checkpoint)
        built.load_checkpoint(progress.checkpoint)
    elif policy.adapter is not None:
        _log.info("%s starts from the adapter %s", name, policy.adapter)
        load_adapter_weights(built.model, policy.adapter)
    return built
