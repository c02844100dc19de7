"""Policy losses, KL estimators and loss normalizers of the ratio-based updates (GRPO, PPO).

Every function works on flat per-token tensors of the trained tokens of a batch (shape
``[N]``) and takes keyword-only arguments. The step's loss is
``sum(norm * (policy_loss + kl_coef * kl))`` where ``norm`` comes from a normalizer computed
over the *whole* step batch, so splitting the batch into micro-batches (gradient accumulation)
changes nothing. This module uses tensor methods only, so importing it does not import torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, get_args

from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "GAP_BOUNDS",
    "KL_ESTIMATORS",
    "LOSS_NORMALIZERS",
    "POLICY_LOSSES",
    "PolicyLossTerms",
    "RatioTotals",
    "MISMATCH_CORRECTIONS",
    "MismatchCorrection",
    "MismatchGap",
    "TokenCorrection",
    "check_loss_names",
    "clipped_policy_loss",
    "correct_engine_mismatch",
    "correct_stale_tokens",
    "k1_kl",
    "k3_kl",
    "rollout_normalizer",
    "token_normalizer",
    "unclipped_policy_loss",
]

# exp() of a log-ratio beyond this overflows to inf in float32 long before it means anything.
_MAX_LOG_RATIO = 20.0


@dataclass(frozen=True)
class PolicyLossTerms:
    """Per-token policy loss and what happened to the ratio (``[N]`` each)."""

    loss: Tensor
    ratio: Tensor
    is_clipped_low: Tensor
    is_clipped_high: Tensor


@dataclass
class RatioTotals:
    """Sums of a ratio-based update's terms over a step's trained tokens (GRPO, PPO).

    ``loss`` and ``policy_loss`` are summed per optimizer step (already normalized over the
    step), the rest per token; :meth:`ratio_metrics` turns them into the step's means. Each
    algorithm's own totals extend this with what only it measures.
    """

    loss: float = 0.0
    policy_loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    clipped_low: int = 0
    clipped_high: int = 0
    ratio: float = 0.0
    tokens: int = 0

    def add_terms(self, terms: PolicyLossTerms, *, entropy: Tensor | None, tokens: int) -> None:
        """Add one micro-batch's policy-loss terms, its entropies and its trained-token count."""
        if entropy is not None:
            self.entropy += float(entropy.sum())
        self.clipped_low += int(terms.is_clipped_low.sum())
        self.clipped_high += int(terms.is_clipped_high.sum())
        self.ratio += float(terms.ratio.sum())
        self.tokens += tokens

    def ratio_metrics(self, epochs: int) -> dict[str, float]:
        """Return the step's losses (mean over epochs) and the per-token means of the rest."""
        n = max(self.tokens, 1)
        return {
            "loss": self.loss / epochs,
            "policy_loss": self.policy_loss / epochs,
            "kl": self.kl / n,
            "entropy": self.entropy / n,
            "clip_fraction": (self.clipped_low + self.clipped_high) / n,
            "clip_fraction_low": self.clipped_low / n,
            "clip_fraction_high": self.clipped_high / n,
            "ratio_mean": self.ratio / n,
        }


def _check_same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1 or any(len(s) != 1 for s in shapes.values()):
        raise ConfigError(f"expected 1-D tensors of one shape; got {shapes}")


def clipped_policy_loss(
    *,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    clip_low: float,
    clip_high: float,
) -> PolicyLossTerms:
    """PPO's clipped surrogate: ``-min(r * A, clip(r, 1 - lo, 1 + hi) * A)`` per token.

    ``r = exp(logprobs - old_logprobs)`` is the importance ratio against the behaviour
    logprobs the gateway recorded. A token counts as clipped low/high when the clipped term is
    the one chosen (and it differs from the unclipped term).
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    ratio = (logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    unclipped_loss = -advantages * ratio
    clipped_loss = -advantages * clipped
    loss = unclipped_loss.maximum(clipped_loss)
    uses_clip = clipped_loss > unclipped_loss
    return PolicyLossTerms(
        loss=loss,
        ratio=ratio.detach(),
        is_clipped_low=(uses_clip & (ratio < 1.0 - clip_low)).detach(),
        is_clipped_high=(uses_clip & (ratio > 1.0 + clip_high)).detach(),
    )


def unclipped_policy_loss(
    *,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    clip_low: float,
    clip_high: float,
) -> PolicyLossTerms:
    """Importance-weighted policy gradient without clipping: ``-r * A`` (clip args unused)."""
    del clip_low, clip_high
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    ratio = (logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    never = ratio.detach() != ratio.detach()  # all False, right shape and device
    return PolicyLossTerms(-advantages * ratio, ratio.detach(), never, never)


@dataclass(frozen=True)
class TokenCorrection:
    """What an importance-sampling correction does to a batch's tokens (``[N]`` each).

    Attributes:
        old_logprobs: the ratio's denominator per token: the current policy's logprob before
            the update on corrected tokens, the behaviour logprob on the others.
        weights: the loss weight per token: the truncated (or masked) importance weight on
            corrected tokens, exactly 1 on the others.
    """

    old_logprobs: Tensor
    weights: Tensor


def correct_stale_tokens(
    *,
    current_logprobs: Tensor,
    behaviour_logprobs: Tensor,
    is_stale: Tensor,
    cap: float,
) -> TokenCorrection:
    """Correct tokens an older policy sampled by truncated importance sampling (decoupled PPO).

    A stale token's clipped ratio is taken against ``current_logprobs`` (the policy being
    trained, before this update: detached), so the trust region is around the current policy;
    the gap from the behaviour policy that sampled it is corrected by the truncated weight
    ``min(exp(current - behaviour), cap)`` on its loss. Fresh tokens are left as they were:
    ratio against the behaviour logprobs, weight exactly 1.
    """
    _check_same_shape(
        current_logprobs=current_logprobs, behaviour_logprobs=behaviour_logprobs, is_stale=is_stale
    )
    if not cap > 0:
        raise ConfigError(f"cap must be > 0; got {cap}")
    current = current_logprobs.detach()
    log_gap = (current - behaviour_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    weights = log_gap.exp().clamp(max=cap).where(is_stale, 1.0)
    return TokenCorrection(current.where(is_stale, behaviour_logprobs), weights)


#: The ratios ``exp(trainer - engine)`` counted as in bounds unless a config says otherwise.
GAP_BOUNDS = (0.5, 2.0)
#: ``grpo.mismatch.correction``: what is done about the engine-trainer gap of fresh tokens.
MismatchCorrection = Literal["none", "tis", "mask_tokens", "mask_sequences"]
MISMATCH_CORRECTIONS: tuple[str, ...] = get_args(MismatchCorrection)


def _sequence_log_ratio(log_ratio: Tensor, rows: Tensor) -> Tensor:
    """Return each token's sequence mean of ``log_ratio``: its sequence's geometric-mean ratio.

    A long sequence is judged by its typical token, not by a product that grows with its length.
    """
    count = int(rows.max()) + 1 if rows.numel() else 0
    sums = log_ratio.new_zeros(count).index_add_(0, rows, log_ratio)
    tokens = rows.bincount(minlength=count).to(log_ratio.dtype)
    return (sums / tokens.clamp(min=1))[rows]


def correct_engine_mismatch(
    *,
    current_logprobs: Tensor,
    engine_logprobs: Tensor,
    rows: Tensor,
    correction: str,
    cap: float,
    bounds: tuple[float, float],
    exempt: Tensor | None = None,
) -> TokenCorrection:
    """Correct the gap between the engine that sampled the tokens and the trainer's numerics.

    An engine's kernels (vLLM in bfloat16, say) never give exactly the trainer's logprobs, so
    ``exp(current - engine)`` drifts from 1 even on-policy. With a correction, a token's clipped
    ratio is taken against ``current_logprobs`` (the trainer's policy before this update,
    detached), and the gap is handled by the loss weight: ``"tis"`` truncated importance
    sampling, ``min(exp(current - engine), cap)``; ``"mask_tokens"`` weight 0 on a token whose
    ratio is outside ``bounds`` (else 1); ``"mask_sequences"`` weight 0 on every token of a
    sequence (``rows``) whose geometric-mean ratio is outside ``bounds``. ``"none"`` leaves
    every token as it is (ratio against the engine's logprobs, weight 1). ``exempt`` tokens
    (stale ones, corrected by :func:`correct_stale_tokens`) are left as they are.
    """
    _check_same_shape(current_logprobs=current_logprobs, engine_logprobs=engine_logprobs, rows=rows)
    if correction not in MISMATCH_CORRECTIONS:
        raise ConfigError(
            f"unknown mismatch correction {correction!r}; allowed: {list(MISMATCH_CORRECTIONS)}"
        )
    current = current_logprobs.detach()
    if correction == "none":
        return TokenCorrection(engine_logprobs, current.new_ones(current.shape))
    log_ratio = (current - engine_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    low, high = bounds
    if correction == "tis":
        weights = log_ratio.exp().clamp(max=cap)
    else:
        judged = log_ratio if correction == "mask_tokens" else _sequence_log_ratio(log_ratio, rows)
        ratio = judged.exp()
        weights = ((ratio >= low) & (ratio <= high)).to(current.dtype)
    anchor = current
    if exempt is not None:
        weights = weights.where(~exempt, 1.0)
        anchor = current.where(~exempt, engine_logprobs)
    return TokenCorrection(anchor, weights)


@dataclass
class MismatchGap:
    """Sums of the engine-trainer logprob gap over a step's trained tokens (first pass only).

    ``d = current - engine`` per token, ``current`` the trainer's logprob before the update:
    ``gap_abs`` and ``gap_max`` of ``|d|``, ``gap_kl`` of k3's ``exp(d) - d - 1`` (an unbiased
    estimate of KL(engine || trainer) from the engine's samples), ``gap_outside`` the tokens
    whose ratio ``exp(d)`` is outside the bounds, ``gap_weight`` and ``gap_masked`` what the
    correction did to them. ``gap_max`` is a maximum, every other field a sum.
    """

    #: The fields that are maxima (over micro-batches, and over a data-parallel step's ranks).
    MAXIMA: ClassVar[tuple[str, ...]] = ("gap_max",)

    gap_tokens: int = 0
    gap_abs: float = 0.0
    gap_max: float = 0.0
    gap_kl: float = 0.0
    gap_outside: int = 0
    gap_weight: float = 0.0
    gap_masked: int = 0

    def add_gap(
        self,
        *,
        current_logprobs: Tensor,
        engine_logprobs: Tensor,
        weights: Tensor,
        bounds: tuple[float, float],
    ) -> None:
        """Add one micro-batch's engine-trainer gap."""
        delta = current_logprobs.detach() - engine_logprobs
        delta = delta.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        if not delta.numel():
            return
        ratio = delta.exp()
        exact = delta.double()  # k3 of a 1e-6 gap is ~5e-13: below float32's resolution near 1
        self.gap_tokens += int(delta.numel())
        self.gap_abs += float(delta.abs().sum())
        self.gap_max = max(self.gap_max, float(delta.abs().max()))
        self.gap_kl += float((exact.exp() - exact - 1.0).sum())
        self.gap_outside += int(((ratio < bounds[0]) | (ratio > bounds[1])).sum())
        self.gap_weight += float(weights.sum())
        self.gap_masked += int((weights == 0).sum())

    def gap_metrics(self) -> dict[str, float]:
        """Return the step's ``mismatch/*`` metrics (empty when nothing was measured)."""
        if not self.gap_tokens:
            return {}
        n = self.gap_tokens
        return {
            "mismatch/gap_mean": self.gap_abs / n,
            "mismatch/gap_max": self.gap_max,
            "mismatch/kl": self.gap_kl / n,
            "mismatch/outside_fraction": self.gap_outside / n,
            "mismatch/weight_mean": self.gap_weight / n,
            "mismatch/masked_fraction": self.gap_masked / n,
        }


def k3_kl(*, logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(policy || reference): ``exp(d) - d - 1``, ``d = ref - pi``.

    Non-negative per token and unbiased for samples drawn from the policy.
    """
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    delta = (ref_logprobs - logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return delta.exp() - delta - 1.0


def k1_kl(*, logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Estimate KL by the plain log-ratio ``d = pi - ref``, with a gradient that is KL's.

    The value is ``d`` (unbiased, noisy, can be negative). As a loss term ``d`` itself is
    useless: its gradient ``grad log pi`` has expectation zero under the policy, so the
    penalty pulled nothing (gradient norm 0.0007 against 0.31 for the true KL gradient). The
    returned tensor has the value ``d`` and the score-function gradient ``d * grad log pi``
    (``d`` held constant), whose expectation is ``grad KL(pi || ref)``: the KL penalty as a
    per-token reward, as PPO for language models applies it.
    """
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    delta = (logprobs - ref_logprobs).detach()
    return delta * (1.0 + logprobs - logprobs.detach())


def token_normalizer(*, token_rollout: Tensor, num_rollouts: int) -> Tensor:
    """Every trained token of the batch weighs ``1 / N``."""
    del num_rollouts
    n = token_rollout.shape[0]
    return token_rollout.float().new_full((n,), 1.0 / max(n, 1))


def rollout_normalizer(*, token_rollout: Tensor, num_rollouts: int) -> Tensor:
    """Weigh a token of rollout ``r`` by ``1 / (n_r * R)``: each rollout sums to ``1 / R``.

    ``n_r`` is the number of trained tokens of rollout ``r`` in the batch and ``R`` the number
    of rollouts, so a rollout with more calls or longer answers does not weigh more.
    """
    if token_rollout.ndim != 1:
        raise ConfigError(f"token_rollout must be 1-D; got shape {tuple(token_rollout.shape)}")
    if num_rollouts < 1:
        raise ConfigError(f"num_rollouts must be >= 1; got {num_rollouts}")
    counts = token_rollout.bincount(minlength=num_rollouts).float()
    return 1.0 / (counts[token_rollout] * num_rollouts)


POLICY_LOSSES: Mapping[str, Callable[..., PolicyLossTerms]] = {
    "clipped": clipped_policy_loss,
    "unclipped": unclipped_policy_loss,
}
KL_ESTIMATORS: Mapping[str, Callable[..., Tensor]] = {"k3": k3_kl, "k1": k1_kl}
LOSS_NORMALIZERS: Mapping[str, Callable[..., Tensor]] = {
    "token": token_normalizer,
    "rollout": rollout_normalizer,
}


def check_loss_names(policy_loss: str, kl_estimator: str) -> None:
    """Check an update config's ``policy_loss`` and ``kl_estimator`` against the tables.

    Raises:
        ValueError: either names no entry; the message lists the allowed ones.
    """
    if policy_loss not in POLICY_LOSSES:
        raise ValueError(f"unknown policy_loss {policy_loss!r}; allowed: {sorted(POLICY_LOSSES)}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl_estimator {kl_estimator!r}; allowed: {sorted(KL_ESTIMATORS)}")
