"""Sampling: per-request parameters and the batched logits → token step.

Logprobs are those of the model's raw distribution (``log_softmax`` of the logits, before
temperature and top-p), which is what vLLM returns by default; a trainer recomputing logprobs
of the same tokens gets the same numbers. Each sequence that samples owns a ``torch.Generator``
seeded from the request's ``seed`` (plus the choice index), so seeded requests reproduce
whatever else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["SampledToken", "SamplingParams", "sample"]


@dataclass(frozen=True)
class SamplingParams:
    """What one request asks of the sampler and of the stopping rules."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0


@dataclass(frozen=True)
class SampledToken:
    """One chosen token with its raw logprob and, when asked, the top alternatives."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail of ``probs`` (1-D) outside the smallest set with mass >= top_p."""
    sorted_probs, order = torch.sort(probs, descending=True)
    cumulative = torch.cumsum(sorted_probs, dim=-1)
    drop = cumulative - sorted_probs >= top_p  # keep the token that crosses the threshold
    sorted_probs[drop] = 0.0
    return torch.zeros_like(probs).scatter_(0, order, sorted_probs)


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> list[SampledToken]:
    """Choose one token per row of ``logits`` [B, V] (float32) under each row's params."""
    logprobs = torch.log_softmax(logits, dim=-1)
    chosen = torch.argmax(logits, dim=-1)
    for row, p in enumerate(params):
        if p.temperature <= 0.0:
            continue
        probs = torch.softmax(logits[row] / p.temperature, dim=-1)
        if p.top_p < 1.0:
            probs = _top_p_filter(probs, p.top_p)
        chosen[row] = torch.multinomial(probs, 1, generator=generators[row])[0]
    picked = logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1).tolist()
    ids = chosen.tolist()
    max_top = max((p.top_logprobs for p in params), default=0)
    tops: list[tuple[tuple[int, float], ...]] = [()] * len(params)
    if max_top > 0:
        values, indices = torch.topk(logprobs, max_top, dim=-1)
        v, i = values.tolist(), indices.tolist()
        tops = [
            tuple(zip(i[r][: p.top_logprobs], v[r][: p.top_logprobs], strict=True))
            for r, p in enumerate(params)
        ]
    return [SampledToken(int(ids[r]), float(picked[r]), tops[r]) for r in range(len(params))]
