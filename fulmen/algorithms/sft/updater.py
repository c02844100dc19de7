"""The SFT updater: negative log-likelihood of the selected completion tokens.

``SFTUpdater.train(examples)`` shuffles the examples (seeded), takes one optimizer step per
``batch_size`` sequences for ``epochs`` passes, and averages the loss over the trained tokens
of each step; gradients of a step are accumulated over micro-batches planned by a padded-token
budget, so the split does not change the update. ``mean_logprob`` measures the policy's mean
token logprob of a set of examples (the metric that shows SFT raised their likelihood). The
policy loading, the logprobs on recorded ids and the micro-batching are the ones GRPO uses
(``fulmen.algorithms.policy``, ``fulmen.algorithms.batching``). With a ``collective``
(``docs/data-parallel.md``) each step's sequences are split over the ranks, the loss is still
divided by the step's whole token count, and the gradients are summed before the step.
The forward and backward of an update run in train mode (the model's and LoRA's dropout, as in
any fine-tuning; activation checkpointing recomputes in the same mode); a step whose gradient
norm is not finite is skipped and counted (``sft/skipped_nonfinite``).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from fulmen.algorithms import checkpoint
from fulmen.algorithms.batching import MicroBatch, TokenSample, collate, plan_micro_batches
from fulmen.algorithms.optimizer import apply_gradients
from fulmen.algorithms.parallel import sharding
from fulmen.algorithms.parallel.collective import split_samples
from fulmen.algorithms.policy import (
    autocast_context,
    load_causal_lm,
    token_logprobs,
    update_mode,
)
from fulmen.algorithms.sft.config import SFTConfig
from fulmen.algorithms.sft.dataset import SFTExample

__all__ = ["SFTUpdater"]

logger = logging.getLogger(__name__)


class SFTUpdater(checkpoint.UpdaterFiles[SFTConfig]):
    """Owns the policy and its optimizer; fine-tunes on SFT examples.

    Args:
        model: a transformers causal LM (with ``finetune: full`` every one of its weights is
            trained).
        config: the fine-tuning settings (``config.seed`` must be set: the run's seed).
    """

    def __init__(self, model: nn.Module, *, config: SFTConfig) -> None:
        self._hold_policy(model, config)
        self.seed = config.seed or 0

    @classmethod
    def from_pretrained(cls, path: str | Path, *, config: SFTConfig) -> SFTUpdater:
        """Load the policy from a local Hugging Face directory and build an engine for it."""
        return cls(load_causal_lm(path, dtype=config.dtype), config=config)

    def train(self, examples: Sequence[SFTExample], *, round_index: int = 0) -> dict[str, float]:
        """Fine-tune on ``examples``; return ``loss`` (mean over steps), ``sft/steps``, timing."""
        started = time.perf_counter()
        cfg = self.config
        samples = [_sample(e) for e in examples]
        skipped = self.skipped_nonfinite
        losses: list[float] = []
        norms: list[float] = []
        for epoch in range(cfg.epochs):
            order = list(range(len(samples)))
            random.Random(f"{self.seed}:{round_index}:{epoch}").shuffle(order)
            for start in range(0, len(order), cfg.batch_size):
                batch = [samples[i] for i in order[start : start + cfg.batch_size]]
                tokens = sum(len(s.positions) for s in batch)
                if self.collective is not None:  # rank 0: each rank gets some sequences
                    parts = split_samples(batch, self.collective.world_size, key=lambda i, _: i)
                    batch = self.collective.share([(part, tokens) for part in parts])[0]
                loss, norm = self.train_batch(batch, tokens=tokens)
                losses.append(loss)
                norms.append(norm)
        return {
            "loss": sum(losses) / len(losses) if losses else float("nan"),
            "grad_norm": _mean([n for n in norms if math.isfinite(n)]),
            "sft/steps": float(len(losses)),
            "sft/skipped_nonfinite": float(self.skipped_nonfinite - skipped),
            "sft/train_s": time.perf_counter() - started,
        }

    def mean_logprob(self, examples: Sequence[SFTExample]) -> float:
        """Mean logprob per trained token of ``examples`` under the current policy.

        A sharded policy (``parallel.sharding``) measures on every rank, each on some examples.
        """
        if sharding.is_sharded(self.model):
            return sharding.everywhere(self, _sharded_mean_logprob, list(examples))
        total, count = self._logprob_sum([_sample(e) for e in examples])
        return total / count if count else float("nan")

    @torch.no_grad()
    def _logprob_sum(self, samples: Sequence[TokenSample]) -> tuple[float, int]:
        """Sum of the trained tokens' logprobs and their count (fillers keep sharded ranks even)."""
        total, count = 0.0, 0
        plan = plan_micro_batches(
            lengths=[len(s) for s in samples], token_budget=self.config.micro_batch_tokens
        )
        fillers = sharding.lockstep_fillers(self, len(plan))  # before any pass: a collective
        for group in plan:
            batch = collate([samples[i] for i in group], pad_id=self.pad_token_id).to(self.device)
            logprobs = self._logprobs(batch)
            total += float(logprobs.sum())
            count += batch.num_tokens
        for _ in range(fillers):
            filler = collate([sharding.filler_sample(self.pad_token_id)], pad_id=self.pad_token_id)
            self._logprobs(filler.to(self.device))
        return total, count

    def train_part(self, part: tuple[Sequence[TokenSample], int]) -> None:
        """Train on this rank's share of a step: ``(samples, tokens)`` as ``train_batch`` takes."""
        samples, tokens = part
        self.train_batch(samples, tokens=tokens)

    def train_batch(self, samples: Sequence[TokenSample], *, tokens: int) -> tuple[float, float]:
        """Take one optimizer step on the mean NLL over ``tokens``; return loss and grad norm.

        ``tokens`` is the step's trained-token count: with a ``collective`` ``samples`` is this
        rank's share of the step, and the gradients and the loss are summed over the ranks.
        """
        loss = self._accumulate(samples, tokens)
        if self.collective is not None:
            if not sharding.is_sharded(self.model):  # FSDP2 reduced them already
                params = [p for group in self.optimizer.param_groups for p in group["params"]]
                self.collective.sum_gradients(params)
            loss = self.collective.sum_values([loss])[0]
        norm = apply_gradients(self.optimizer, max_grad_norm=self.config.max_grad_norm)
        if not math.isfinite(norm):
            self.skipped_nonfinite += 1
            logger.warning(
                "SFT step %d: gradient norm %s is not finite; the optimizer step was skipped",
                self.step,
                norm,
            )
        self.step += 1
        return loss, norm

    def _accumulate(self, samples: Sequence[TokenSample], tokens: int) -> float:
        """Add the gradient of the samples' token NLL over ``tokens``; return that loss."""
        loss_total = 0.0
        scale = sharding.gradient_scale(self)
        plan = plan_micro_batches(
            lengths=[len(s) for s in samples], token_budget=self.config.micro_batch_tokens
        )
        fillers = sharding.lockstep_fillers(self, len(plan))
        for group in plan:
            batch = collate([samples[i] for i in group], pad_id=self.pad_token_id).to(self.device)
            # Train mode through backward (checkpointing recomputes the forward there): the
            # model's and LoRA's dropout apply, as in any fine-tuning.
            with update_mode(self.model, dropout="all"):
                loss = -self._logprobs(batch).sum() / tokens
                (loss * scale).backward()
            loss_total += float(loss.detach())
        for _ in range(fillers):  # sharded: every rank runs as many passes as the busiest
            filler = collate([sharding.filler_sample(self.pad_token_id)], pad_id=self.pad_token_id)
            with update_mode(self.model, dropout="all"):
                (self._logprobs(filler.to(self.device)).sum() * 0.0).backward()
        return loss_total

    def _logprobs(self, batch: MicroBatch) -> torch.Tensor:
        with autocast_context(self.config):
            logprobs, _ = token_logprobs(
                self.model,
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                rows=batch.rows,
                positions=batch.positions,
                chunk_tokens=self.config.logit_chunk_tokens,
            )
        return logprobs


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _sample(example: SFTExample) -> TokenSample:
    """Convert an example to the shared micro-batching's sample (SFT has no advantages: ones)."""
    n = len(example.positions)
    return TokenSample(
        input_ids=example.input_ids,
        positions=example.positions,
        old_logprobs=[0.0] * n,
        advantages=[1.0] * n,
        norm=[1.0] * n,
        rollout=0,
    )


def _sharded_mean_logprob(engine: SFTUpdater, examples: list[SFTExample]) -> float:
    """``mean_logprob`` over every rank of a sharded policy: each rank takes every W-th example."""
    collective = engine.collective
    assert collective is not None
    mine = examples[collective.rank :: collective.world_size]
    total, count = engine._logprob_sum([_sample(e) for e in mine])
    total, count = collective.sum_values([total, float(count)])
    return total / count if count else float("nan")
