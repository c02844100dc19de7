"""Step-level continuous batching with a shared KV cache, on one dedicated thread.

Each loop iteration (1) applies queued weight updates that no running sequence depends on,
(2) admits waiting requests up to ``max_batch`` sequences, prefills them together (left
padded) and merges their KV cache into the running batch, and (3) decodes one token for every
running sequence in a single forward pass. Finished sequences leave the batch after any step,
and new ones join at the next, so short and long requests share the model without waiting for
each other. Rows are kept left-padded: each row's real tokens are contiguous at the right end,
positions are passed explicitly, and the attention mask hides the padding.

A weight update that touches what a running sequence uses (a full reload, or replacing or
removing the adapter it runs on) waits until those sequences finish, and admission pauses
meanwhile, so every response is produced by one policy version.

Memory is bounded by a KV budget: rows x columns of the padded running batch's cache (every
row is as wide as the widest). A request is admitted only if the batch, with each sequence at
its longest (prompt plus ``max_tokens``), stays within ``kv_budget_tokens`` (default
``max_batch`` full contexts); one that does not waits, and a request alone in an empty batch
always runs. A prompt is prefilled in chunks of at most ``prefill_chunk_tokens`` (rows x
columns), appended in place to a cache allocated once for the whole prefill, so the
activations of a pass stay the size of a chunk whatever the prompt's length.

With a :class:`PrefixCache`, a new sequence takes the KV of its longest cached prompt prefix
as past keys and values and computes only the rest (see :mod:`.prefill`); its prompt's blocks
are cached after the prefill, and its prompt plus output when it finishes (the next turn of a
multi-turn rollout extends it). Cache entries are keyed by adapter and the version that loaded
it, and an update drops the entries of the weights it touches.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from fulmen.engines.builtin.errors import APIError, not_found
from fulmen.engines.builtin.kv_cache import GrowableCache
from fulmen.engines.builtin.metrics import EngineCounters
from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.builtin.prefill import (
    PrefillBatch,
    PrefillRow,
    build_batch,
    plan_groups,
    row_kv,
)
from fulmen.engines.builtin.prefix_cache import PrefixCache
from fulmen.engines.builtin.sampling import sample
from fulmen.engines.builtin.sequence import Job, JobFailed, JobStarted, Sequence

__all__ = ["ALL_WEIGHTS", "Scheduler"]

logger = logging.getLogger(__name__)

#: ``touches`` value of an update that changes the base weights (every sequence depends on it).
ALL_WEIGHTS = "*"

#: Decode steps of spare room in a cache the loop rebuilds (merge, drop): a step writes in place.
_HEADROOM = 128


@dataclass
class _Update:
    apply: Callable[[], int]
    touches: str
    future: Future[int]


class Scheduler:
    """Runs all generation for one :class:`ServedModel` on a background thread.

    Args:
        model: the served model; only this thread runs its forward pass and updates.
        max_batch: most sequences decoded together (a request with a larger ``n`` still runs,
            alone).
        threads: torch intra-op threads for the batching thread.
        prefix_cache: reuse the KV of cached prompt prefixes (``None``: recompute every
            prompt).
        prefill_chunk_tokens: most prompt tokens (rows x columns) one prefill pass computes;
            longer prompts are prefilled in several passes.
        kv_budget_tokens: most padded KV columns (rows x widest row, each sequence counted at
            prompt plus ``max_tokens``) the running batch may reach; ``None``: ``max_batch``
            times the model's context.
    """

    def __init__(
        self,
        model: ServedModel,
        *,
        max_batch: int = 8,
        threads: int = 1,
        prefix_cache: PrefixCache | None = None,
        prefill_chunk_tokens: int = 2048,
        kv_budget_tokens: int | None = None,
    ) -> None:
        if prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens must be >= 1, got {prefill_chunk_tokens}")
        if kv_budget_tokens is not None and kv_budget_tokens < 1:
            raise ValueError(f"kv_budget_tokens must be >= 1, got {kv_budget_tokens}")
        self.model = model
        self.max_batch = max_batch
        self.threads = threads
        self.prefix_cache = prefix_cache
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.kv_budget_tokens = kv_budget_tokens or max_batch * model.max_model_len
        self.counters = EngineCounters()
        self._waiting: collections.deque[Job] = collections.deque()
        self._updates: collections.deque[_Update] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._rows: list[Sequence] = []
        self._cache: Any = None
        self._mask: torch.Tensor | None = None
        self._thread = threading.Thread(target=self._loop, name="fulmen-batching", daemon=True)

    def start(self) -> None:
        """Start the batching thread."""
        self._thread.start()

    def close(self) -> None:
        """Stop the thread after the current step; waiting requests are failed."""
        self._closed = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def submit(self, job: Job) -> None:
        """Queue a request (thread-safe); its events arrive through ``job.sink``."""
        job.submitted_at = time.monotonic()
        with self._lock:
            self._waiting.append(job)
        self._wake.set()

    def update(self, apply: Callable[[], int], *, touches: str) -> Future[int]:
        """Queue a weight update; ``touches`` is an adapter name or :data:`ALL_WEIGHTS`."""
        future: Future[int] = Future()
        with self._lock:
            self._updates.append(_Update(apply, touches, future))
        self._wake.set()
        return future

    @property
    def running(self) -> int:
        """Number of sequences currently in the batch."""
        return len(self._rows)

    @property
    def waiting(self) -> int:
        """Number of requests waiting for admission."""
        return len(self._waiting)

    @property
    def kv_tokens(self) -> int:
        """Padded KV columns the running batch holds now (rows x widest row)."""
        mask = self._mask
        return 0 if mask is None else int(mask.shape[0] * mask.shape[1])

    @staticmethod
    def _longest(seq: Sequence) -> int:
        """Columns ``seq`` can reach: its prompt plus its ``max_tokens``."""
        return len(seq.job.prompt_ids) + seq.job.params.max_tokens

    def _loop(self) -> None:
        torch.set_num_threads(self.threads)
        while not self._closed:
            self._wake.clear()
            blocked = self._apply_updates()
            new = [] if blocked else self._admit()
            if not new and not self._rows:
                self._wake.wait(0.5)
                continue
            try:
                with torch.inference_mode():
                    if new:
                        self._prefill(new)
                    if self._rows:
                        self._decode()
            except Exception as exc:  # a failed step fails its requests, not the server
                logger.exception("generation step failed")
                self._fail_all([*self._rows, *new], exc)
        self._fail_all(self._rows, RuntimeError("server shutting down"))
        with self._lock:
            waiting, self._waiting = list(self._waiting), collections.deque()
        for job in waiting:
            job.sink(JobFailed(APIError("server shutting down", status=503)))

    def _apply_updates(self) -> bool:
        """Apply updates in order; True while one waits for running sequences to drain."""
        while True:
            with self._lock:
                if not self._updates:
                    return False
                head = self._updates[0]
                busy = any(
                    head.touches == ALL_WEIGHTS or s.job.adapter == head.touches for s in self._rows
                )
                if busy:
                    return True
                self._updates.popleft()
            try:
                result = head.apply()
            except Exception as exc:  # it may have changed weights before failing
                self._invalidate(head.touches)
                head.future.set_exception(exc)
            else:
                self._invalidate(head.touches)
                head.future.set_result(result)

    def _invalidate(self, touches: str) -> None:
        """Drop cached KV computed with weights an update changed."""
        if self.prefix_cache is None:
            return
        if touches == ALL_WEIGHTS:
            self.prefix_cache.invalidate()
        else:
            self.prefix_cache.invalidate(lambda ns: isinstance(ns, tuple) and ns[0] == touches)

    def _namespace(self, adapter: str | None) -> tuple[str | None, int]:
        """Return the prefix-cache key of the weights ``adapter`` selects (name, load version)."""
        info = self.model.adapters.get(adapter) if adapter is not None else None
        return (adapter, info.version if info is not None else 0)

    def _admit(self) -> list[Sequence]:
        new: list[Sequence] = []
        counters = self.counters
        with self._lock:
            now = time.monotonic() if self._waiting else 0.0
            widest = max((self._longest(s) for s in [*self._rows, *new]), default=0)
            while self._waiting:
                job = self._waiting[0]
                size = len(self._rows) + len(new)
                if job.cancelled:
                    self._waiting.popleft()
                    continue
                if size and size + job.n > self.max_batch:
                    break
                longest = len(job.prompt_ids) + job.params.max_tokens
                if size and (size + job.n) * max(widest, longest) > self.kv_budget_tokens:
                    break  # the padded KV cache would outgrow the budget: wait
                widest = max(widest, longest)
                self._waiting.popleft()
                if job.adapter is not None and job.adapter not in self.model.adapters:
                    job.sink(JobFailed(not_found(f"The model `{job.adapter}` does not exist.")))
                    continue
                job.sequences = [Sequence(job, i) for i in range(job.n)]
                counters.queue_wait_s += now - job.submitted_at
                counters.admitted_requests += 1
                job.sink(JobStarted(self.model.served_version(job.adapter)))
                new.extend(job.sequences)
        return new

    def _prefill(self, new: list[Sequence]) -> None:
        cache = self.prefix_cache
        rows: list[PrefillRow] = []
        for seq in new:
            seq.namespace = self._namespace(seq.job.adapter)
            prompt = seq.job.prompt_ids
            match = None
            if cache is not None:  # the last prompt token is always computed: its logits
                match = cache.match(seq.namespace, prompt, limit=len(prompt) - 1)
            rows.append(PrefillRow(seq, seq.namespace, match))
        try:
            for group in plan_groups(rows):
                seqs = [r.seq for r in group]
                headroom = min(128, max(s.job.params.max_tokens for s in seqs))
                batch = build_batch(
                    group, self.model.pad_token_id, self.model.kv_shape, headroom=headroom
                )
                logits = self._prefill_chunks(batch, [s.job.adapter for s in seqs])
                self.counters.prefill_passes += 1
                self.counters.prompt_tokens += sum(r.length for r in group)
                if cache is not None:
                    self._remember_prompts(cache, group, batch.cache, batch.used)
                self._merge(seqs, batch.cache, batch.mask)
                self._emit(seqs, logits)
                self._drop_finished()
        finally:
            for row in rows:
                if row.match is not None:
                    row.match.release()

    def _prefill_chunks(self, batch: PrefillBatch, adapters: list[str | None]) -> torch.Tensor:
        """Run a prefill's columns in chunks of ``prefill_chunk_tokens``; the last one's logits."""
        rows, width = batch.ids.shape
        past = batch.mask.shape[1] - width
        step = max(1, self.prefill_chunk_tokens // rows)
        logits: torch.Tensor | None = None
        for start in range(0, width, step):
            end = min(width, start + step)
            logits = self.model.forward(
                batch.ids[:, start:end],
                batch.mask[:, : past + end],
                batch.positions[:, start:end],
                batch.cache,
                adapters,
            )
            self.counters.prefill_chunks += 1
        assert logits is not None  # a prefill has at least one column
        return logits

    def _remember_prompts(
        self, cache: PrefixCache, group: list[PrefillRow], kv: Any, used: list[int]
    ) -> None:
        """Count hits and misses, and cache the prompt blocks this prefill computed."""
        for i, (row, u) in enumerate(zip(group, used, strict=True)):
            cache.stats.hit_tokens += u
            cache.stats.miss_tokens += row.length - u
            matched = row.match.tokens if row.match is not None else 0
            start = matched - matched % cache.block_size
            if row.length - start >= cache.block_size:  # a whole new block to store
                prompt = row.seq.job.prompt_ids
                cache.insert(row.namespace, prompt, row_kv(kv, i, row.length, start), offset=start)

    def _decode(self) -> None:
        if self._mask is None:  # rows exist only together with a cache and a mask
            return
        rows = self._rows
        ids = torch.tensor([[s.pending] for s in rows], dtype=torch.long)
        positions = self._mask.sum(dim=1, keepdim=True)
        mask = torch.cat([self._mask, torch.ones((len(rows), 1), dtype=torch.long)], dim=1)
        logits = self.model.forward(
            ids, mask, positions, self._cache, [s.job.adapter for s in rows]
        )
        self.counters.decode_passes += 1
        self.counters.decode_rows += len(rows)
        self._mask = mask
        self._emit(rows, logits)
        self._drop_finished()

    def _emit(self, rows: list[Sequence], logits: torch.Tensor) -> None:
        tokens = sample(logits, [s.job.params for s in rows], [s.generator for s in rows])
        m = self.model
        emitted = 0
        for seq, token in zip(rows, tokens, strict=True):
            if not seq.is_done:
                seq.job.sink(seq.append(token, m.tokenizer, m.eos_token_ids, m.max_model_len))
                emitted += 1
        self.counters.generated_tokens += emitted
        self.counters.rate.add(emitted)

    def _merge(self, new: list[Sequence], cache: Any, mask: torch.Tensor) -> None:
        """Append the prefilled rows to the running batch, left-padding the shorter side."""
        if not self._rows or self._mask is None:
            self._rows, self._cache, self._mask = list(new), cache, mask
            return
        width = max(self._mask.shape[1], mask.shape[1])
        old_rows = len(self._rows)
        merged = GrowableCache.allocate(
            self.model.kv_shape,
            batch=old_rows + len(new),
            filled=width,
            capacity=width + _HEADROOM,
        )
        layers = zip(merged.pairs(), self._cache.pairs(), cache.pairs(), strict=True)
        for (keys, values), (old_k, old_v), (new_k, new_v) in layers:
            for target, old, fresh in ((keys, old_k, new_k), (values, old_v, new_v)):
                target[:old_rows, :, width - old.shape[2] :] = old
                target[old_rows:, :, width - fresh.shape[2] :] = fresh
        old_pad, new_pad = width - self._mask.shape[1], width - mask.shape[1]
        self._mask = torch.cat([F.pad(self._mask, (old_pad, 0)), F.pad(mask, (new_pad, 0))])
        self._cache = merged
        self._rows = [*self._rows, *new]

    def _drop_finished(self) -> None:
        """Remove finished rows and the padding columns no remaining row needs."""
        keep = [i for i, s in enumerate(self._rows) if not s.is_done]
        if len(keep) == len(self._rows):
            return
        if self.prefix_cache is not None and self._mask is not None:
            self._remember_outputs(
                self.prefix_cache, [i for i, s in enumerate(self._rows) if s.finish_reason]
            )
        if not keep or self._mask is None:
            self._rows, self._cache, self._mask = [], None, None
            return
        mask = self._mask.index_select(0, torch.tensor(keep, dtype=torch.long))
        lead = int((mask.sum(dim=0) == 0).long().cumprod(dim=0).sum())
        self._mask = mask[:, lead:]
        width = self._mask.shape[1]
        kept = GrowableCache.allocate(
            self.model.kv_shape, batch=len(keep), filled=width, capacity=width + _HEADROOM
        )
        for (keys, values), (old_k, old_v) in zip(kept.pairs(), self._cache.pairs(), strict=True):
            for target, source in ((keys, old_k), (values, old_v)):
                for row, i in enumerate(keep):
                    target[row] = source[i, :, lead:]
        self._cache = kept
        self._rows = [self._rows[i] for i in keep]

    def _remember_outputs(self, cache: PrefixCache, finished: list[int]) -> None:
        """Cache prompt + output blocks of finished rows, for a next turn that extends them."""
        if self._mask is None:
            return
        lengths = self._mask.sum(dim=1).tolist()
        for i in finished:
            seq = self._rows[i]
            tokens = [*seq.job.prompt_ids, *seq.output_ids[:-1]]  # the last one has no KV yet
            start = len(seq.job.prompt_ids) - len(seq.job.prompt_ids) % cache.block_size
            if lengths[i] != len(tokens) or len(tokens) - start < cache.block_size:
                continue
            cache.insert(
                seq.namespace, tokens, row_kv(self._cache, i, len(tokens), start), offset=start
            )

    def _fail_all(self, rows: list[Sequence], exc: BaseException) -> None:
        error = (
            exc
            if isinstance(exc, APIError)
            else APIError(f"generation failed: {exc}", status=500, type="InternalServerError")
        )
        for job in {id(s.job): s.job for s in rows}.values():
            job.sink(JobFailed(error))
        self._rows, self._cache, self._mask = [], None, None
