"""Requests and sequences as the batching loop sees them, and the events it sends back.

A :class:`Job` is one API request (``n`` sequences sharing a prompt); each :class:`Sequence`
is one choice. The loop reports through ``Job.sink`` (called on the batching thread; the
server forwards to its event loop): one :class:`JobStarted` with the policy version, then one
:class:`TokenEvent` per generated token, the last of each choice carrying ``finish_reason``,
or a single :class:`JobFailed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from fulmen.engines.builtin.errors import APIError
from fulmen.engines.builtin.sampling import SampledToken, SamplingParams

__all__ = ["Job", "JobFailed", "JobStarted", "Sequence", "TokenEvent"]


@dataclass(frozen=True)
class JobStarted:
    """The job was admitted into the batch; every token comes from ``policy_version``."""

    policy_version: int


@dataclass(frozen=True)
class JobFailed:
    """The job could not run (for example its adapter was unloaded before admission)."""

    error: APIError


@dataclass(frozen=True)
class TokenEvent:
    """One generated token of choice ``index`` and the text it completes."""

    index: int
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]
    text: str
    finish_reason: str | None


@dataclass
class Job:
    """One request: a prompt, sampling parameters, the adapter (``None`` = base) and ``n``."""

    prompt_ids: list[int]
    params: SamplingParams
    adapter: str | None
    n: int
    sink: Callable[[JobStarted | JobFailed | TokenEvent], None]
    cancelled: bool = False  # set by the server when the client goes away
    submitted_at: float = 0.0  # monotonic clock when the scheduler queued it
    sequences: list[Sequence] = field(default_factory=lambda: [])


class Sequence:
    """One choice being generated: its tokens, detokenized text and stopping state."""

    def __init__(self, job: Job, index: int) -> None:
        self.job = job
        self.index = index
        self.output_ids: list[int] = []
        self.pending = -1  # last sampled token, not yet in the KV cache
        self.finish_reason: str | None = None
        self.namespace: Any = None  # prefix-cache key of the weights it runs on
        self._emitted = ""
        seed = job.params.seed
        self.generator: torch.Generator | None = None
        if job.params.temperature > 0:
            self.generator = torch.Generator()
            if seed is not None:
                self.generator.manual_seed(seed + index)
            else:
                self.generator.seed()

    @property
    def is_done(self) -> bool:
        """Finished, or its client went away."""
        return self.finish_reason is not None or self.job.cancelled

    def append(
        self, token: SampledToken, tokenizer: Any, eos_ids: frozenset[int], max_model_len: int
    ) -> TokenEvent:
        """Record ``token``, apply the stopping rules and return the event to send."""
        p = self.job.params
        self.output_ids.append(token.token_id)
        self.pending = token.token_id
        if token.token_id in p.stop_token_ids or (token.token_id in eos_ids and not p.ignore_eos):
            self.finish_reason = "stop"
        elif len(self.output_ids) >= p.max_tokens or (
            len(self.job.prompt_ids) + len(self.output_ids) >= max_model_len
        ):
            self.finish_reason = "length"
        text = tokenizer.decode(self.output_ids, skip_special_tokens=True)
        if p.stop:
            hits = [i for i in (text.find(s) for s in p.stop) if i >= 0]
            if hits:
                text = text[: min(hits)]
                self.finish_reason = "stop"
        if self.finish_reason is None:
            text = text.rstrip("\ufffd")  # an incomplete UTF-8 sequence: wait for more bytes
            if p.stop:  # hold back what could still become a stop string
                keep = max(len(self._emitted), len(text) - max(len(s) for s in p.stop) + 1)
                text = text[:keep]
        delta = text[len(self._emitted) :] if text.startswith(self._emitted) else ""
        self._emitted += delta
        return TokenEvent(
            self.index, token.token_id, token.logprob, token.top, delta, self.finish_reason
        )
