"""The DPO updater: one optimizer step on a batch of preference pairs, and checkpoints.

``DPOUpdater.train_step(pairs)`` drops pairs with an overlong sequence, plans micro-batches of
whole pairs (a pair's chosen and rejected sequences always share one, so each pair's loss is
computed where its four logprobs are) by a padded-token budget, and per micro-batch takes the
reference's sequence logprobs (the policy with its LoRA adapter disabled, no graph:
``fulmen.algorithms.policy.ReferencePolicy``) and then the policy's, adds the gradient of
the pairs' DPO loss divided by the step's pair count, and takes one clipped AdamW step. The
split into micro-batches does not change the update. With a ``collective``
(``docs/data-parallel.md``) each rank takes some of the step's pairs, the loss is still divided
by the step's whole pair count, and the gradients are summed (or, sharded, reduced by FSDP2)
before every rank takes the same step. The forward and backward run in
``update_mode(dropout="lora")``: the base model's dropout stays off, as in GRPO. A step whose
gradient norm is not finite is skipped and counted. Torch and peft are imported here, never by
``import fulmen``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from fulmen.algorithms import checkpoint
from fulmen.algorithms.batching import MicroBatch, TokenSample, collate, plan_micro_batches
from fulmen.algorithms.dpo.config import DPOConfig
from fulmen.algorithms.dpo.loss import DPOTerms, dpo_loss
from fulmen.algorithms.dpo.pairs import PreferencePair
from fulmen.algorithms.optimizer import apply_gradients
from fulmen.algorithms.parallel import sharding
from fulmen.algorithms.parallel.collective import split_indices
from fulmen.algorithms.policy import (
    ReferencePolicy,
    autocast_context,
    token_logprobs,
    update_mode,
)

__all__ = ["DPOUpdater"]


@dataclass
class _Totals:
    """Sums over the pairs of one step, turned into means at the end."""

    loss: float = 0.0
    margin: float = 0.0
    correct: int = 0
    chosen_reward: float = 0.0
    rejected_reward: float = 0.0
    chosen_logp: float = 0.0
    rejected_logp: float = 0.0
    pairs: int = 0

    def add(self, terms: DPOTerms, chosen: Tensor, rejected: Tensor) -> None:
        self.loss += float(terms.loss.detach().sum())
        self.margin += float(terms.margins.sum())
        self.correct += int((terms.margins > 0).sum())
        self.chosen_reward += float(terms.chosen_rewards.sum())
        self.rejected_reward += float(terms.rejected_rewards.sum())
        self.chosen_logp += float(chosen.detach().sum())
        self.rejected_logp += float(rejected.detach().sum())
        self.pairs += int(chosen.shape[0])

    def metrics(self) -> dict[str, float]:
        n = max(self.pairs, 1)
        return {
            "loss": self.loss / n,
            "dpo/margin": self.margin / n,
            "dpo/accuracy": self.correct / n,
            "dpo/chosen_reward": self.chosen_reward / n,
            "dpo/rejected_reward": self.rejected_reward / n,
            "dpo/chosen_logp": self.chosen_logp / n,
            "dpo/rejected_logp": self.rejected_logp / n,
        }


class DPOUpdater(checkpoint.UpdaterFiles[DPOConfig]):
    """Owns the LoRA policy and its optimizer; updates it on preference pairs.

    Args:
        model: a transformers causal LM (a peft model is accepted).
        config: the update's settings (``config.seed`` must be set: the run's seed).
    """

    def __init__(self, model: nn.Module, *, config: DPOConfig) -> None:
        self._hold_policy(model, config)
        self.reference = ReferencePolicy(self.model, finetune="lora")

    def train_step(self, pairs: Sequence[PreferencePair]) -> dict[str, float]:
        """Take one optimizer step on the mean DPO loss of ``pairs``; return its metrics.

        The margins, accuracy and implicit rewards are those of the policy before the step
        (the forward the gradient comes from). No pair left: no step (``updated`` 0).
        """
        started = time.perf_counter()
        kept = [p for p in pairs if self._fits(p)]
        metrics: dict[str, float] = {
            "dpo/trained_pairs": float(len(kept)),
            "dpo/dropped_overlong": float(len(pairs) - len(kept)),
        }
        if not kept:
            metrics.update(updated=0.0, step_time_s=time.perf_counter() - started)
            return metrics
        total = len(kept)
        if self.collective is not None:  # rank 0: each rank gets some pairs
            sizes = [_pair_length(p) for p in kept]
            parts = split_indices(sizes, self.collective.world_size)
            kept = self.collective.share([([kept[i] for i in part], total) for part in parts])[0]
        totals, norm = self._train_pairs(kept, total)
        updated = math.isfinite(norm)
        metrics.update(totals.metrics())
        metrics.update(
            updated=float(updated),
            skipped_nonfinite=float(not updated),
            grad_norm=norm,
            learning_rate=self.config.learning_rate,
            step_time_s=time.perf_counter() - started,
        )
        return metrics

    def train_part(self, part: tuple[Sequence[PreferencePair], int]) -> None:
        """Train on this rank's share of a step: ``(pairs, total)`` (``parallel.updater``)."""
        pairs, total = part
        self._train_pairs(pairs, total)

    def _train_pairs(self, pairs: Sequence[PreferencePair], total: int) -> tuple[_Totals, float]:
        """Take the optimizer step on the mean loss over ``total`` pairs, ``pairs`` this rank's.

        With a ``collective`` the gradients and totals are summed over the ranks, so every rank
        takes the batch's step. Returns the batch's totals and the gradient norm.
        """
        totals = self._backward(pairs, total)
        if self.collective is not None:
            if not sharding.is_sharded(self.model):  # FSDP2 reduced them already
                params = [p for group in self.optimizer.param_groups for p in group["params"]]
                self.collective.sum_gradients(params)
            totals = self.collective.sum_fields(totals)
        norm = apply_gradients(self.optimizer, max_grad_norm=self.config.max_grad_norm)
        self.skipped_nonfinite += not math.isfinite(norm)
        self.step += 1
        return totals, norm

    def compute_gradients(self, pairs: Sequence[PreferencePair]) -> dict[str, float]:
        """Accumulate the step's loss gradient into the parameters' ``.grad``, without a step.

        For inspection and tests (the micro-batch invariance compares these gradients);
        ``train_step`` is the way to train. Call ``self.optimizer.zero_grad()`` before reusing
        the updater.
        """
        kept = [p for p in pairs if self._fits(p)]
        return self._backward(kept, len(kept)).metrics()

    def _backward(self, pairs: Sequence[PreferencePair], total: int) -> _Totals:
        """Add the gradient of the DPO loss of ``pairs`` over ``total``, micro-batch by micro-batch.

        Under sharding every rank runs as many micro-batches as the busiest: the others add
        fillers (one pad token a sequence, no gradient).
        """
        totals = _Totals()
        scale = sharding.gradient_scale(self)
        plan = self._plan(pairs)
        fillers = sharding.lockstep_fillers(self, len(plan))  # before any pass: a collective
        for group in plan:
            batch = self._collate([pairs[i] for i in group])
            ref_logps = self._reference_logps(batch)
            # The update's mode holds through backward (checkpointing recomputes in it).
            with update_mode(self.model, dropout="lora"):
                terms, chosen, rejected = self._terms(batch, ref_logps)
                (terms.loss.sum() / total * scale).backward()
            totals.add(terms, chosen, rejected)
        for _ in range(fillers):
            filler = sharding.filler_sample(self.pad_token_id)
            batch = collate([filler, filler], pad_id=self.pad_token_id).to(self.device)
            ref_logps = self._reference_logps(batch)
            with update_mode(self.model, dropout="lora"):
                terms, _, _ = self._terms(batch, ref_logps)
                (terms.loss.sum() * 0.0).backward()
        return totals

    @torch.no_grad()
    def margins(self, pairs: Sequence[PreferencePair]) -> list[float]:
        """Return each pair's implicit reward margin ``β Δ`` under the current policy."""
        out = [0.0] * len(pairs)
        for group in self._plan(pairs):
            batch = self._collate([pairs[i] for i in group])
            terms, _, _ = self._terms(batch, self._reference_logps(batch))
            for i, margin in zip(group, terms.margins.tolist(), strict=True):
                out[i] = margin
        return out

    def _fits(self, pair: PreferencePair) -> bool:
        (chosen, chosen_at), (rejected, rejected_at) = pair.sequences()
        limit = self.max_seq_len
        return bool(chosen_at and rejected_at) and max(len(chosen), len(rejected)) <= limit

    def _plan(self, pairs: Sequence[PreferencePair]) -> list[list[int]]:
        """Group pair indices so two rows per pair stay within the padded-token budget."""
        lengths = [len(p.prompt) + max(len(p.chosen), len(p.rejected)) for p in pairs]
        budget = max(1, self.config.micro_batch_tokens // 2)
        return plan_micro_batches(lengths=lengths, token_budget=budget)

    def _collate(self, pairs: Sequence[PreferencePair]) -> MicroBatch:
        """Rows ``2k`` and ``2k + 1`` of the batch: pair ``k``'s chosen and rejected sequence."""
        samples = [_sample(ids, at) for p in pairs for ids, at in p.sequences()]
        return collate(samples, pad_id=self.pad_token_id).to(self.device)

    def _reference_logps(self, batch: MicroBatch) -> Tensor:
        """Return the reference's sequence logprobs (adapter disabled, eval mode, no graph)."""
        with torch.no_grad(), self.reference.active() as reference:
            return self._sequence_logps(reference, batch)

    def _terms(self, batch: MicroBatch, ref_logps: Tensor) -> tuple[DPOTerms, Tensor, Tensor]:
        """Return the batch's DPO terms and the policy's chosen and rejected logprobs."""
        logps = self._sequence_logps(self.model, batch)
        chosen, rejected = logps[0::2], logps[1::2]
        terms = dpo_loss(
            chosen_logps=chosen,
            rejected_logps=rejected,
            ref_chosen_logps=ref_logps[0::2],
            ref_rejected_logps=ref_logps[1::2],
            beta=self.config.beta,
            label_smoothing=self.config.label_smoothing,
        )
        return terms, chosen, rejected

    def _sequence_logps(self, model: nn.Module, batch: MicroBatch) -> Tensor:
        """Sum of each row's trained-token logprobs (``[rows]``)."""
        with autocast_context(self.config):
            logprobs, _ = token_logprobs(
                model,
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                rows=batch.rows,
                positions=batch.positions,
                chunk_tokens=self.config.logit_chunk_tokens,
            )
        rows = int(batch.input_ids.shape[0])
        return logprobs.new_zeros(rows).index_add(0, batch.rows, logprobs)


def _pair_length(pair: PreferencePair) -> int:
    """Tokens of a pair's two sequences (how ranks balance their shares)."""
    return 2 * len(pair.prompt) + len(pair.chosen) + len(pair.rejected)


def _sample(input_ids: list[int], positions: list[int]) -> TokenSample:
    """Return a sequence as the shared micro-batching's sample (only ids and positions count)."""
    zeros = [0.0] * len(positions)
    return TokenSample(
        input_ids=input_ids,
        positions=positions,
        old_logprobs=zeros,
        advantages=zeros,
        norm=zeros,
        rollout=0,
    )
