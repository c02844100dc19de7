"""The GRPO updater: one policy update from a batch of transitions, and checkpoints.

``GRPOUpdater.train_step(transitions)`` computes group-relative advantages over the batch,
splits it into micro-batches by a padded-token budget, accumulates the gradient of the clipped
importance-ratio loss (plus the optional KL to the reference) over them, and takes one
optimizer step per epoch. With a ``collective`` (``docs/data-parallel.md``) this rank trains
only its share of the batch's rollouts, with the batch's loss weights, and the gradients are
summed over the ranks before each step. The model stays in eval mode (dropout off) so its
logprobs match the sampler's; gradients flow regardless. The policy's forward and backward
run in ``update_mode``: only the flags the config asked for are in train mode (activation
checkpointing, LoRA dropout), and they stay so through ``backward()``, where checkpointing
recomputes the forward. A step whose gradient norm is not finite is skipped (no optimizer
step, counted in ``skipped_nonfinite``). Long sequences (``fulmen.algorithms.sequence_lengths``):
``max_seq_len`` defaults to the model's context, a micro-batch over the token budget recomputes
its activations in the backward, and the transitions dropped for length are logged with their
lengths each step. A stop request (``fulmen.algorithms.stopping``) ends an update at its next
safe point without an optimizer step. Torch, transformers and peft are imported here, never
by ``import fulmen``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fulmen.algorithms import checkpoint
from fulmen.algorithms.batching import MicroBatch, TokenSample, collate, plan_micro_batches
from fulmen.algorithms.grpo.config import GRPOConfig
from fulmen.algorithms.grpo.samples import build_samples
from fulmen.algorithms.losses import (
    KL_ESTIMATORS,
    POLICY_LOSSES,
    MismatchGap,
    RatioTotals,
    correct_engine_mismatch,
    correct_stale_tokens,
)
from fulmen.algorithms.optimizer import apply_gradients, build_optimizer
from fulmen.algorithms.parallel import sharding
from fulmen.algorithms.parallel.collective import Collective, split_samples
from fulmen.algorithms.policy import (
    ReferencePolicy,
    autocast_context,
    load_causal_lm,
    pad_token_of,
    policy_device,
    prepare_seeded_policy,
    token_logprobs,
    update_mode,
)
from fulmen.algorithms.sequence_lengths import (
    describe_plan,
    is_checkpointed,
    model_context,
    overlong_lengths,
    overlong_warning,
    padded_tokens,
    resolve_max_seq_len,
)
from fulmen.algorithms.stopping import UpdateStopped
from fulmen.types.transitions import Transition

__all__ = ["GRPOUpdater"]

logger = logging.getLogger(__name__)


@dataclass
class _Totals(RatioTotals, MismatchGap):
    """The policy's sums over the micro-batches of one step, and GRPO's own."""

    logprob_gap: float = 0.0
    input_tokens: int = 0
    micro_batches: int = 0
    stale_tokens: int = 0  # is_weight / is_truncated: over these (``is_cap`` only)
    is_weight: float = 0.0
    is_truncated: int = 0

    def metrics(self, epochs: int) -> dict[str, float]:
        n = max(self.tokens, 1)
        return {
            **self.ratio_metrics(epochs),
            "logprob_gap": self.logprob_gap / n,
            "micro_batches": float(self.micro_batches),
            **self._stale_metrics(),
            **self.gap_metrics(),
        }

    def _stale_metrics(self) -> dict[str, float]:
        if not self.stale_tokens:
            return {}
        return {
            "stale_tokens": float(self.stale_tokens),
            "is_weight_mean": self.is_weight / self.stale_tokens,
            "is_truncated_fraction": self.is_truncated / self.stale_tokens,
        }


class GRPOUpdater(checkpoint.UpdaterFiles[GRPOConfig]):
    """Owns the policy, its optimizer and (with KL) the reference; updates from transitions.

    Args:
        model: a transformers causal LM (a peft model is accepted for ``finetune="lora"``).
        config: the engine's settings.
        pad_token_id: id used to pad micro-batches (never attended to nor trained).
        adapter_name: the LoRA adapter this engine trains. Several engines can share one peft
            model, each with its own adapter and optimizer (one adapter per role,
            ``fulmen.algorithms.grpo.roles``): each makes its adapter the active one before it
            computes, saves or loads anything, so the others get no gradient.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        config: GRPOConfig | None = None,
        pad_token_id: int | None = None,
        adapter_name: str = "default",
    ) -> None:
        self.config = config or GRPOConfig()
        self.adapter_name = adapter_name
        self.model = prepare_seeded_policy(
            model, self.config, seed=self.config.seed, adapter_name=adapter_name
        )
        self.activate()
        #: The model's context (``None``: its config names none); ``max_seq_len`` defaults to it.
        self.context_length = model_context(self.model)
        limit = resolve_max_seq_len(self.config.max_seq_len, self.model)
        self.config = self.config.model_copy(update={"max_seq_len": limit})
        self.device = policy_device(self.config)
        self._reference = (
            ReferencePolicy(self.model, finetune=self.config.finetune)
            if self.config.kl_coef > 0
            else None
        )
        self.optimizer: torch.optim.Optimizer = build_optimizer(self.model, self.config)
        self.pad_token_id = pad_token_id if pad_token_id is not None else pad_token_of(self.model)
        self.step = 0
        #: Optimizer steps skipped because the gradient norm was not finite.
        self.skipped_nonfinite = 0
        self.policy_version: str | None = None
        #: The data-parallel group this engine updates with (``None``: this process alone).
        self.collective: Collective | None = None
        #: A sharded checkpoint to load once the ranks shard the policy (``parallel.sharding``).
        self.resume_shards: Path | None = None

    def activate(self) -> None:
        """Make this engine's adapter the one peft runs and trains (a no-op when alone)."""
        peft_config = getattr(self.model, "peft_config", None)
        if self.config.finetune == "lora" and peft_config is not None and len(peft_config) > 1:
            self.model.set_adapter(self.adapter_name)  # type: ignore[operator]

    @classmethod
    def from_pretrained(cls, path: str | Path, *, config: GRPOConfig | None = None) -> GRPOUpdater:
        """Load the policy from a local Hugging Face directory and build an engine for it."""
        cfg = config or GRPOConfig()
        return cls(load_causal_lm(path, dtype=cfg.dtype), config=cfg)

    def train_step(
        self, transitions: Sequence[Transition], *, policy_version: str | None = None
    ) -> dict[str, float]:
        """Update the policy from one batch of transitions; return the step's metrics.

        ``policy_version`` (default: ``self.policy_version``) is the version of the current
        weights, used only to count stale transitions. A batch with nothing to train (every
        group has equal rewards, say) takes no optimizer step; ``metrics["updated"]`` says.
        """
        started = time.perf_counter()
        cfg = self.config
        samples, metrics = self._samples(transitions, policy_version)
        self._report_overlong(transitions, metrics)
        if not samples:
            metrics.update(updated=0.0, step_time_s=time.perf_counter() - started)
            return metrics
        if self.collective is not None:  # rank 0: send the other ranks their rollouts
            samples = self.collective.share(split_samples(samples, self.collective.world_size))
        skipped = self.skipped_nonfinite
        totals, grad_norm = self.train_samples(samples)
        elapsed = time.perf_counter() - started
        metrics.update(totals.metrics(cfg.epochs))
        if self.skipped_nonfinite > skipped:
            logger.warning(
                "GRPO step %d: gradient norm %s is not finite; the optimizer step was skipped "
                "and the weights are unchanged (%d such steps so far)",
                self.step,
                grad_norm,
                self.skipped_nonfinite,
            )
        if self.skipped_nonfinite > skipped:
            metrics["trained_tokens"] = 0.0  # the step was not taken
        metrics.update(
            updated=0.0 if self.skipped_nonfinite > skipped else 1.0,
            skipped_nonfinite=float(self.skipped_nonfinite - skipped),
            grad_norm=grad_norm,
            step_time_s=elapsed,
            tokens_per_s=totals.input_tokens / elapsed,
            trained_tokens_per_s=totals.tokens / elapsed,
            learning_rate=cfg.learning_rate,
        )
        return metrics

    def _report_overlong(
        self, transitions: Sequence[Transition], metrics: dict[str, float]
    ) -> None:
        """Log the transitions dropped for length, with their lengths; the longest in metrics."""
        limit = self.config.max_seq_len or 0
        lengths = overlong_lengths(transitions, limit)
        if lengths:
            metrics["dropped_overlong_longest"] = float(max(lengths))
            logger.warning(
                "GRPO step %d: %s",
                self.step,
                overlong_warning(
                    lengths,
                    max_seq_len=limit,
                    context=self.context_length,
                    option="algorithm.grpo.max_seq_len",
                ),
            )

    def train_part(self, part: Sequence[TokenSample]) -> None:
        """Train on this rank's share of a step (``parallel.updater.Updater``)."""
        self.train_samples(part)

    def train_samples(self, samples: Sequence[TokenSample]) -> tuple[_Totals, float]:
        """Take the step's ``epochs`` optimizer steps from built samples; return totals, norm.

        With a ``collective`` the samples are this rank's share and the gradients (and the
        totals) are summed over the ranks, so every rank takes the batch's step. A gradient
        norm that is not finite takes no optimizer step (every rank sees the same summed norm)
        and ends the step's epochs; ``skipped_nonfinite`` counts it.
        """
        self.activate()
        totals = _Totals()
        grad_norm = 0.0
        for epoch in range(self.config.epochs):
            try:
                self._backward(samples, totals, first_pass=epoch == 0)
            except UpdateStopped:
                self.optimizer.zero_grad(set_to_none=True)  # no half-accumulated step remains
                logger.warning(
                    "GRPO step %d: the update stopped at a safe point (the run is stopping); "
                    "the weights are those of the last finished step",
                    self.step,
                )
                raise
            if self.collective is not None and not sharding.is_sharded(self.model):
                self.collective.sum_gradients(self._trainable)  # FSDP2 reduced them already
            grad_norm = apply_gradients(self.optimizer, max_grad_norm=self.config.max_grad_norm)
            if not math.isfinite(grad_norm):
                self.skipped_nonfinite += 1
                break
        self.step += 1
        if self.collective is not None:  # the batch's totals (the gap's maximum is a maximum)
            totals = self.collective.sum_fields(totals, maxima=MismatchGap.MAXIMA)
        return totals, grad_norm

    @property
    def _trainable(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def compute_gradients(
        self, transitions: Sequence[Transition], *, policy_version: str | None = None
    ) -> dict[str, float]:
        """Accumulate one pass's loss gradient into the parameters' ``.grad``, without a step.

        For inspection and tests (the invariants compare these gradients); ``train_step`` is
        the way to train. Call ``self.optimizer.zero_grad()`` before reusing the engine.
        """
        samples, metrics = self._samples(transitions, policy_version)
        totals = _Totals()
        if samples:
            self.activate()
            self._backward(samples, totals, first_pass=True)
        metrics.update(totals.metrics(1))
        return metrics

    def _samples(
        self, transitions: Sequence[Transition], policy_version: str | None
    ) -> tuple[list[TokenSample], dict[str, float]]:
        version = policy_version if policy_version is not None else self.policy_version
        samples, stats = build_samples(transitions, config=self.config, policy_version=version)
        metrics = stats.as_metrics()
        metrics["step"] = float(self.step)
        return samples, metrics

    def _backward(
        self, samples: Sequence[TokenSample], totals: _Totals, *, first_pass: bool = False
    ) -> None:
        """Accumulate one pass's gradients; the first pass logs its plan and measures the gap."""
        cfg = self.config
        plan = plan_micro_batches(
            lengths=[len(s) for s in samples], token_budget=cfg.micro_batch_tokens
        )
        padded = padded_tokens(plan, [len(s) for s in samples])
        is_long, line = describe_plan(
            padded, budget=cfg.micro_batch_tokens, setting=cfg.gradient_checkpointing
        )
        if first_pass:
            (logger.info if is_long else logger.debug)("GRPO step %d: %s", self.step, line)
        fillers = sharding.lockstep_fillers(self, len(plan))  # before any pass: a collective
        for group, tokens in zip(plan, padded, strict=True):
            batch = collate([samples[i] for i in group], pad_id=self.pad_token_id)
            checkpoint = is_checkpointed(
                cfg.gradient_checkpointing, padded_tokens=tokens, budget=cfg.micro_batch_tokens
            )
            self._accumulate(
                batch.to(self.device), totals, checkpoint=checkpoint, first_pass=first_pass
            )
        for _ in range(fillers):  # sharded: as many passes as the busiest rank
            filler = collate([sharding.filler_sample(self.pad_token_id)], pad_id=self.pad_token_id)
            self._accumulate(filler.to(self.device), _Totals(), checkpoint=False, first_pass=False)

    def _accumulate(
        self, batch: MicroBatch, totals: _Totals, *, checkpoint: bool, first_pass: bool
    ) -> None:
        cfg = self.config
        coordinates: dict[str, Any] = {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            "rows": batch.rows,
            "positions": batch.positions,
            "temperature": cfg.temperature,
            "chunk_tokens": cfg.logit_chunk_tokens,
        }
        ref_logprobs = None
        if self._reference is not None:  # eval mode, no graph: before the policy's forward
            with torch.no_grad(), autocast_context(cfg), self._reference.active() as reference:
                ref_logprobs, _ = token_logprobs(reference, **coordinates)
        with update_mode(self.model, dropout="lora", checkpoint=checkpoint):
            self._loss_backward(batch, coordinates, ref_logprobs, totals, first_pass=first_pass)

    def _loss_backward(
        self,
        batch: MicroBatch,
        coordinates: dict[str, Any],
        ref_logprobs: torch.Tensor | None,
        totals: _Totals,
        *,
        first_pass: bool,
    ) -> None:
        cfg = self.config
        with autocast_context(cfg):
            logprobs, entropy = token_logprobs(self.model, with_entropy=True, **coordinates)
        old_logprobs, is_weights = batch.old_logprobs, None
        mismatch = cfg.mismatch
        if first_pass:  # epochs is 1 with a correction: these are the logprobs before the update
            engine = correct_engine_mismatch(
                current_logprobs=logprobs,
                engine_logprobs=batch.old_logprobs,
                rows=batch.rows,
                correction=mismatch.applied,
                cap=mismatch.truncation,
                bounds=mismatch.bounds,
                exempt=batch.is_stale if cfg.is_cap is not None else None,
            )
            fresh = None if batch.is_stale is None or cfg.is_cap is None else ~batch.is_stale
            totals.add_gap(
                current_logprobs=logprobs if fresh is None else logprobs[fresh],
                engine_logprobs=batch.old_logprobs if fresh is None else batch.old_logprobs[fresh],
                weights=engine.weights if fresh is None else engine.weights[fresh],
                bounds=mismatch.bounds,
            )
            if mismatch.applied != "none":
                old_logprobs, is_weights = engine.old_logprobs, engine.weights
        if cfg.is_cap is not None and batch.is_stale is not None:
            # epochs is 1 (checked by the config): logprobs are the policy before this update
            fix = correct_stale_tokens(
                current_logprobs=logprobs,
                behaviour_logprobs=batch.old_logprobs,
                is_stale=batch.is_stale,
                cap=cfg.is_cap,
            )
            old_logprobs = fix.old_logprobs.where(batch.is_stale, old_logprobs)
            is_weights = fix.weights if is_weights is None else fix.weights * is_weights
            totals.stale_tokens += int(batch.is_stale.sum())
            totals.is_weight += float(fix.weights[batch.is_stale].sum())
            totals.is_truncated += int((fix.weights[batch.is_stale] >= cfg.is_cap).sum())
        terms = POLICY_LOSSES[cfg.policy_loss](
            logprobs=logprobs,
            old_logprobs=old_logprobs,
            advantages=batch.advantages,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
        )
        policy = terms.loss if is_weights is None else terms.loss * is_weights
        per_token = policy
        if ref_logprobs is not None:
            kl = KL_ESTIMATORS[cfg.kl_estimator](logprobs=logprobs, ref_logprobs=ref_logprobs)
            per_token = per_token + cfg.kl_coef * kl
            totals.kl += float(kl.detach().sum())
        loss = (batch.norm * per_token).sum()
        (loss * sharding.gradient_scale(self)).backward()
        totals.loss += float(loss.detach())
        totals.policy_loss += float((batch.norm * policy.detach()).sum())
        totals.add_terms(terms, entropy=entropy, tokens=batch.num_tokens)
        totals.logprob_gap += float((logprobs.detach() - batch.old_logprobs).abs().sum())
        totals.input_tokens += int(batch.attention_mask.sum())
        totals.micro_batches += 1

    def save_checkpoint(self, directory: str | Path) -> Path:
        """Write trainable weights, optimizer and RNG state, step and config to ``directory``.

        An interrupted save never leaves a half-written checkpoint under ``directory``.
        """
        state = {
            "step": self.step,
            "policy_version": self.policy_version,
            "config": self.config.model_dump(mode="json"),
        }
        self.activate()  # the checkpoint holds the parameters that need grad: this adapter's
        return checkpoint.save_checkpoint(
            self.model,
            self.optimizer,
            directory,
            state=state,
            shards=sharding.shard_writer(self),  # sharded: every rank writes its shard
        )

    def load_checkpoint(self, directory: str | Path) -> None:
        """Restore what ``save_checkpoint`` wrote; the trainable parameter names must match.

        A sharded checkpoint's weights are loaded once the ranks shard the policy.
        """
        self.activate()
        state, self.resume_shards = checkpoint.restore_checkpoint(
            self.model, self.optimizer, directory
        )
        self.step = int(state["step"])
        self.policy_version = state["policy_version"]

    @property
    def frozen(self) -> tuple[nn.Module, ...]:
        """The KL reference's frozen copy of a full fine-tune's starting weights, if any."""
        reference = self._reference
        copy = reference.frozen_copy if reference is not None else None
        return (copy,) if copy is not None else ()
