"""The PPO updater: the policy's LoRA adapter and its value head, one step from a batch of calls.

``PPOUpdater.train_step(transitions)`` keeps the rollouts it can train whole
(``calls.select_calls``), plans micro-batches by a padded-token budget, scores every call with
the value head (no graph: the values of the rollouts, ``V_old``), computes GAE advantages and
returns over each rollout's calls (``gae.gae``), optionally normalizes the advantages over the
batch, and takes ``epochs`` optimizer steps. Each step accumulates, micro-batch by micro-batch,
the gradient of

    Σ_tokens norm · (policy_loss + kl_coef · kl)  +  value_coef · mean_calls(value_loss)

where the policy loss is GRPO's (``fulmen.algorithms.losses.POLICY_LOSSES``, each token
carrying its call's advantage), the KL GRPO's estimator against the adapter-disabled model,
and the value loss the clipped one of ``gae.clipped_value_loss``. One decoder pass gives both
the token logprobs and the values (``policy.hidden_states``). The forward and backward run in
``update_mode(dropout="lora")`` as GRPO's; a step whose gradient norm is not finite is skipped.
Checkpoints hold the adapter, the value head and the optimizer, so a resumed run keeps its
critic; the adapter alone is what the engine serves. With a ``collective``
(``docs/data-parallel.md``) every rank holds the step's calls and trains some rollouts: the
values are summed over the ranks so GAE and the advantage normalization see the whole batch,
and the gradients are summed (or, sharded, the policy's reduced by FSDP2 and the value head's,
held whole on every rank, summed) before every rank takes the same step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from fulmen.algorithms import checkpoint
from fulmen.algorithms.batching import plan_micro_batches
from fulmen.algorithms.losses import (
    GAP_BOUNDS,
    KL_ESTIMATORS,
    LOSS_NORMALIZERS,
    POLICY_LOSSES,
    MismatchGap,
    RatioTotals,
)
from fulmen.algorithms.optimizer import apply_gradients, build_optimizer
from fulmen.algorithms.parallel import sharding
from fulmen.algorithms.parallel.collective import split_indices
from fulmen.algorithms.policy import (
    ReferencePolicy,
    autocast_context,
    causal_lm_of,
    hidden_states,
    token_logprobs,
    update_mode,
)
from fulmen.algorithms.ppo.calls import (
    CallBatch,
    PPOCall,
    collate_calls,
    select_calls,
    with_advantages,
)
from fulmen.algorithms.ppo.config import PPOConfig
from fulmen.algorithms.ppo.gae import clipped_value_loss, explained_variance, gae
from fulmen.algorithms.ppo.value_head import ValueHead
from fulmen.types.transitions import Transition

__all__ = ["PPOUpdater"]


@dataclass
class _Totals(RatioTotals, MismatchGap):
    """The policy's sums, the engine-trainer gap's (first epoch), and the value head's."""

    value_loss: float = 0.0
    value_clipped: int = 0
    calls: int = 0

    def metrics(self, epochs: int) -> dict[str, float]:
        c = max(self.calls, 1)
        return {
            **self.ratio_metrics(epochs),
            **self.gap_metrics(),
            "ppo/value_loss": self.value_loss / c,
            "ppo/value_clip_fraction": self.value_clipped / c,
        }


@dataclass(frozen=True)
class _Targets:
    """The step's per-call tensors (``[C]``): values of the rollouts, returns, advantages."""

    old_values: Tensor
    returns: Tensor
    advantages: Tensor


class PPOUpdater(checkpoint.UpdaterFiles[PPOConfig]):
    """Owns the LoRA policy, its value head and their optimizer; updates them from transitions.

    Args:
        model: a transformers causal LM (a peft model is accepted).
        config: the update's settings (``config.seed`` seeds the adapter's initialization).
    """

    def __init__(self, model: nn.Module, *, config: PPOConfig) -> None:
        self._hold_policy(model, config)
        width = int(causal_lm_of(self.model).get_input_embeddings().embedding_dim)
        self.value_head = ValueHead(width).to(self.device)
        self.reference = (
            ReferencePolicy(self.model, finetune="lora") if config.kl_coef > 0 else None
        )
        self.optimizer = self.new_optimizer()
        # What a checkpoint holds: the adapter's and the value head's trained parameters.
        self._trained = nn.ModuleDict({"policy": self.model, "value_head": self.value_head})

    def train_step(self, transitions: Sequence[Transition]) -> dict[str, float]:
        """Take the step's ``epochs`` optimizer steps on ``transitions``; return its metrics.

        The value and advantage metrics are those of the rollouts (before the update); the
        losses are means over the epochs. No rollout left: no step (``updated`` 0).
        """
        started = time.perf_counter()
        calls, dropped = select_calls(transitions, max_seq_len=self.max_seq_len)
        metrics: dict[str, float] = {
            "ppo/calls": float(len(calls)),
            "ppo/rollouts": float(len({c.sample.rollout for c in calls})),
            "ppo/dropped_rollouts": float(dropped),
        }
        if not calls:
            metrics.update(updated=0.0, step_time_s=time.perf_counter() - started)
            return metrics
        mine = list(range(len(calls)))
        if self.collective is not None:  # rank 0: every rank gets the calls, and its rollouts
            keys = [c.sample.rollout for c in calls]
            parts = split_indices(
                [len(c.sample) for c in calls], self.collective.world_size, keys=keys
            )
            mine = self.collective.share([(calls, part) for part in parts])[1]
        targets, totals, norm = self._train_calls(calls, mine)
        metrics.update(_value_metrics(targets))
        metrics.update(totals.metrics(self.config.epochs))
        metrics.update(
            updated=float(math.isfinite(norm)),
            skipped_nonfinite=float(not math.isfinite(norm)),
            grad_norm=norm,
            trained_tokens=float(sum(len(c.sample.positions) for c in calls))
            if math.isfinite(norm)
            else 0.0,  # no optimizer step was taken
            learning_rate=self.config.learning_rate,
            step_time_s=time.perf_counter() - started,
        )
        return metrics

    def train_part(self, part: tuple[Sequence[PPOCall], Sequence[int]]) -> None:
        """Train on this rank's share of a step: ``(calls, mine)`` (``parallel.updater``)."""
        calls, mine = part
        self._train_calls(calls, mine)

    def _train_calls(
        self, calls: Sequence[PPOCall], mine: Sequence[int]
    ) -> tuple[_Targets, _Totals, float]:
        """Take the step's ``epochs`` optimizer steps; this rank trains the calls ``mine``.

        Every rank holds all of the step's calls: each values its own, the values are summed
        over the ranks, and every rank then runs GAE and the advantage normalization over the
        whole batch, as one process would. The gradients (and the totals) are summed over the
        ranks before each optimizer step. Returns the targets, the totals and the last norm.
        """
        plan = self._plan(calls, mine)
        targets = self._targets(calls, plan)
        calls = self._weighted(calls, targets)
        totals = _Totals()
        norm = 0.0
        for epoch in range(self.config.epochs):
            self._backward(calls, plan, targets, totals, first_pass=epoch == 0)
            if self.collective is not None:
                self._sum_gradients()
            norm = apply_gradients(self.optimizer, max_grad_norm=self.config.max_grad_norm)
            if not math.isfinite(norm):
                self.skipped_nonfinite += 1
                break
        self.step += 1
        if self.collective is not None:
            totals = self.collective.sum_fields(totals, maxima=MismatchGap.MAXIMA)
        return targets, totals, norm

    def _sum_gradients(self) -> None:
        """Sum the ranks' gradients: all of them, or (FSDP2 reduced the policy's) the head's."""
        assert self.collective is not None
        if sharding.is_sharded(self.model):
            sharding.sum_head_gradients(self, list(self.value_head.parameters()))
        else:
            params = [p for group in self.optimizer.param_groups for p in group["params"]]
            self.collective.sum_gradients(params)

    @torch.no_grad()
    def values(self, transitions: Sequence[Transition]) -> list[float]:
        """Return the value head's value of each call of the rollouts ``train_step`` would keep.

        In the order ``train_step`` lays them out: by rollout, each in ``call_index`` order.
        One process (an unsharded updater) only.
        """
        calls, _ = select_calls(transitions, max_seq_len=self.max_seq_len)
        if not calls:
            return []
        return self._values(calls, self._plan(calls, range(len(calls)))).tolist()

    def _plan(self, calls: Sequence[PPOCall], mine: Sequence[int]) -> list[list[int]]:
        """Micro-batches of the calls ``mine``, as indices into ``calls``."""
        lengths = [len(calls[i].sample) for i in mine]
        plan = plan_micro_batches(lengths=lengths, token_budget=self.config.micro_batch_tokens)
        return [[mine[j] for j in group] for group in plan]

    def _batch(self, calls: Sequence[PPOCall], group: Sequence[int]) -> CallBatch:
        return collate_calls(calls, group, pad_id=self.pad_token_id).to(self.device)

    @torch.no_grad()
    def _values(self, calls: Sequence[PPOCall], plan: Sequence[Sequence[int]]) -> Tensor:
        """Score every call with the current value head (eval mode, no graph), as ``[C]``."""
        out = torch.zeros(len(calls), dtype=torch.float64)
        fillers = sharding.lockstep_fillers(self, len(plan))  # before any pass: a collective
        for group in plan:
            batch = self._batch(calls, group)
            out[batch.indices.cpu()] = self._read_values(self._hidden(batch), batch).double().cpu()
        for _ in range(fillers):
            batch = self._filler()
            self._read_values(self._hidden(batch), batch)
        return out

    def _hidden(self, batch: CallBatch) -> Tensor:
        tokens = batch.tokens
        with autocast_context(self.config):
            return hidden_states(
                self.model, input_ids=tokens.input_ids, attention_mask=tokens.attention_mask
            )

    def _filler(self) -> CallBatch:
        """Return a micro-batch of one pad-token call (sharded ranks' lock step; adds nothing)."""
        call = PPOCall(sharding.filler_sample(self.pad_token_id), 0, reward=0.0, is_last=True)
        return self._batch([call], [0])

    def _read_values(self, hidden: Tensor, batch: CallBatch) -> Tensor:
        rows = torch.arange(int(hidden.shape[0]), device=hidden.device)
        return self.value_head(hidden[rows, batch.value_positions])

    def _targets(self, calls: Sequence[PPOCall], plan: Sequence[Sequence[int]]) -> _Targets:
        """Value the calls (each rank its own, summed) and run GAE over each rollout's calls."""
        old_values = self._values(calls, plan)
        if self.collective is not None:  # a call's value is on its rank, 0 on the others
            summed = self.collective.sum_values(old_values.tolist())
            old_values = torch.tensor(summed, dtype=torch.float64)
        result = gae(
            rewards=torch.tensor([c.reward for c in calls], dtype=torch.float64),
            values=old_values,
            is_last=torch.tensor([c.is_last for c in calls]),
            gamma=self.config.gamma,
            lam=self.config.gae_lambda,
        )
        return _Targets(old_values, result.returns, result.advantages)

    def _weighted(self, calls: Sequence[PPOCall], targets: _Targets) -> list[PPOCall]:
        """Put each call's (normalized) advantage on its tokens, and the tokens' loss weights."""
        advantages = targets.advantages
        if self.config.normalize_advantages and len(calls) > 1:
            std = float(advantages.std(unbiased=False))
            advantages = (advantages - advantages.mean()) / (std + 1e-8)
        token_rollout = torch.tensor(
            [c.sample.rollout for c in calls for _ in c.sample.positions], dtype=torch.long
        )
        norm = LOSS_NORMALIZERS[self.config.loss_normalization](
            token_rollout=token_rollout, num_rollouts=int(token_rollout.max()) + 1
        )
        return with_advantages(calls, advantages.tolist(), norm.tolist())

    def _backward(
        self,
        calls: Sequence[PPOCall],
        plan: Sequence[Sequence[int]],
        targets: _Targets,
        totals: _Totals,
        *,
        first_pass: bool,
    ) -> None:
        """Add one epoch's loss gradient, micro-batch by micro-batch (``plan``: this rank's)."""
        fillers = sharding.lockstep_fillers(self, len(plan))  # before any pass: a collective
        for group in plan:
            batch = self._batch(calls, group)
            ref_logprobs = self._reference_logprobs(batch)
            with update_mode(self.model, dropout="lora"):
                self._loss_backward(
                    batch, targets, ref_logprobs, len(calls), totals, first_pass=first_pass
                )
        for _ in range(fillers):
            batch = self._filler()
            self._reference_logprobs(batch)  # the reference's forward is a collective too
            with update_mode(self.model, dropout="lora"):
                hidden = self._hidden(batch)
                with autocast_context(self.config):
                    logprobs, _ = token_logprobs(
                        self.model, hidden=hidden, **self._coordinates(batch)
                    )
                values = self._read_values(hidden, batch)
                ((logprobs.sum() + values.sum()) * 0.0).backward()

    def _coordinates(self, batch: CallBatch) -> dict[str, Any]:
        tokens = batch.tokens
        return {
            "input_ids": tokens.input_ids,
            "attention_mask": tokens.attention_mask,
            "rows": tokens.rows,
            "positions": tokens.positions,
            "temperature": self.config.temperature,
            "chunk_tokens": self.config.logit_chunk_tokens,
        }

    def _reference_logprobs(self, batch: CallBatch) -> Tensor | None:
        if self.reference is None:
            return None
        with (
            torch.no_grad(),
            autocast_context(self.config),
            self.reference.active() as reference,
        ):
            logprobs, _ = token_logprobs(reference, **self._coordinates(batch))
        return logprobs

    def _loss_backward(
        self,
        batch: CallBatch,
        targets: _Targets,
        ref_logprobs: Tensor | None,
        num_calls: int,
        totals: _Totals,
        *,
        first_pass: bool,
    ) -> None:
        cfg, tokens = self.config, batch.tokens
        hidden = self._hidden(batch)
        with autocast_context(cfg):
            logprobs, entropy = token_logprobs(
                self.model,
                with_entropy=True,
                hidden=hidden,
                **self._coordinates(batch),
            )
        if first_pass:  # before any optimizer step: the engine-trainer gap alone
            totals.add_gap(
                current_logprobs=logprobs,
                engine_logprobs=tokens.old_logprobs,
                weights=tokens.old_logprobs.new_ones(tokens.num_tokens),
                bounds=GAP_BOUNDS,
            )
        terms = POLICY_LOSSES[cfg.policy_loss](
            logprobs=logprobs,
            old_logprobs=tokens.old_logprobs,
            advantages=tokens.advantages,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
        )
        per_token = terms.loss
        if ref_logprobs is not None:
            kl = KL_ESTIMATORS[cfg.kl_estimator](logprobs=logprobs, ref_logprobs=ref_logprobs)
            per_token = per_token + cfg.kl_coef * kl
            totals.kl += float(kl.detach().sum())
        index = batch.indices.to(targets.returns.device)
        value_terms = clipped_value_loss(
            values=self._read_values(hidden, batch),
            old_values=targets.old_values[index].to(self.device, torch.float32),
            returns=targets.returns[index].to(self.device, torch.float32),
            clip=cfg.value_clip,
        )
        policy = (tokens.norm * per_token).sum()
        value = value_terms.loss.sum() / num_calls
        ((policy + cfg.value_coef * value) * sharding.gradient_scale(self)).backward()
        totals.loss += float(policy.detach()) + cfg.value_coef * float(value.detach())
        totals.policy_loss += float((tokens.norm * terms.loss.detach()).sum())
        totals.value_loss += float(value_terms.loss.detach().sum())
        totals.value_clipped += int(value_terms.is_clipped.sum())
        totals.add_terms(terms, entropy=entropy, tokens=tokens.num_tokens)
        totals.calls += int(batch.indices.shape[0])

    @property
    def trained(self) -> nn.Module:
        """The adapter and the value head (the head is checkpointed, never served)."""
        return self._trained

    def new_optimizer(self) -> torch.optim.Optimizer:
        """Build a new optimizer: the adapter's group, and the value head's with its own rate."""
        optimizer = build_optimizer(self.model, self.config)
        optimizer.add_param_group(
            {
                "params": list(self.value_head.parameters()),
                "lr": self.config.value_learning_rate or self.config.learning_rate,
            }
        )
        return optimizer


def _value_metrics(targets: _Targets) -> dict[str, float]:
    """Return the critic's figures on the step's calls, before the update."""
    advantages = targets.advantages
    spread = float(advantages.std(unbiased=False)) if advantages.numel() > 1 else 0.0
    return {
        "ppo/value_mean": float(targets.old_values.mean()),
        "ppo/return_mean": float(targets.returns.mean()),
        "ppo/advantage_mean": float(advantages.mean()),
        "ppo/advantage_std": spread,
        "ppo/explained_variance": explained_variance(
            values=targets.old_values, returns=targets.returns
        ),
    }
