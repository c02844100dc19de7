"""Sampling: per-request parameters and the batched logits → token step.

Logprobs are those of the distribution each token was actually sampled from: the logits
divided by the temperature, then restricted to the top-k / top-p set and renormalized. This is
vLLM's ``processed_logprobs`` mode, and it is the behaviour policy a trainer must correct for:
a trainer recomputing ``log_softmax(logits / temperature)`` of the same tokens gets the same
numbers (a trainer cannot reproduce a truncated set, which is why fulmen's trainer refuses
top-k / top-p for training rollouts). Greedy requests (temperature 0) sample from nothing; their
logprobs are those of the unscaled, untruncated distribution. Each sequence that
samples owns a ``torch.Generator`` seeded from the request's ``seed`` (plus the choice index),
so seeded requests reproduce whatever else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["SampledToken", "SamplingParams", "sample"]

#: Reported in place of ``-inf`` (a token outside the top-k / top-p set), as vLLM does; JSON
#: has no infinity.
_MIN_LOGPROB = -9999.0


@dataclass(frozen=True)
class SamplingParams:
    """What one request asks of the sampler and of the stopping rules.

    ``top_k`` of 0 keeps every token; ``top_p`` of 1 keeps every token.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0

    @property
    def is_greedy(self) -> bool:
        """True when the most likely token is taken instead of sampling."""
        return self.temperature <= 0.0


@dataclass(frozen=True)
class SampledToken:
    """One chosen token with its logprob and, when asked, the top alternatives.

    Both are logprobs of the distribution the token was sampled from (see the module doc).
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def _processed_logits(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """Return one row's logits as sampled: divided by temperature, top-k / top-p kept.

    Tokens outside the kept set get ``-inf``, so ``log_softmax`` of the result renormalizes
    over the set. Greedy rows are returned unchanged.
    """
    if p.is_greedy:
        return logits
    scaled = logits / p.temperature
    if 0 < p.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, p.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if p.top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Keep the smallest prefix with mass >= top_p: drop a token once the mass before it
        # already reaches top_p (the token that crosses the threshold stays).
        drop_sorted = torch.cumsum(probs, dim=-1) - probs >= p.top_p
        drop = torch.zeros_like(drop_sorted).scatter_(0, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> list[SampledToken]:
    """Choose one token per row of ``logits`` [B, V] (float32) under each row's params."""
    processed = torch.stack([_processed_logits(logits[r], p) for r, p in enumerate(params)])
    logprobs = torch.log_softmax(processed, dim=-1)
    chosen = torch.argmax(logits, dim=-1)
    for row, p in enumerate(params):
        if not p.is_greedy:
            probs = logprobs[row].exp()
            chosen[row] = torch.multinomial(probs, 1, generator=generators[row])[0]
    picked = logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1).tolist()
    ids = chosen.tolist()
    max_top = max((p.top_logprobs for p in params), default=0)
    tops: list[tuple[tuple[int, float], ...]] = [()] * len(params)
    if max_top > 0:
        values, indices = torch.topk(logprobs.clamp_min(_MIN_LOGPROB), max_top, dim=-1)
        v, i = values.tolist(), indices.tolist()
        tops = [
            tuple(zip(i[r][: p.top_logprobs], v[r][: p.top_logprobs], strict=True))
            for r, p in enumerate(params)
        ]
    return [SampledToken(int(ids[r]), float(picked[r]), tops[r]) for r in range(len(params))]
