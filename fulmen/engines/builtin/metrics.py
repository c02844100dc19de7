"""Engine counters and their ``/metrics`` page in the Prometheus text format (version 0.0.4).

The batching thread updates :class:`EngineCounters`; the server renders them with
:func:`render_metrics` on its event loop. Counters are plain integers (a torn read costs at
most one step's worth of freshness); the generated-tokens rate is taken over a sliding window.

The counters are cumulative, so a reader takes means over any interval from two reads: the mean
decode batch is ``decode_rows_total / decode_passes_total`` and the mean wait for admission
``queue_wait_seconds_total / admitted_requests_total``.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field

from fulmen.engines.builtin.prefix_cache import PrefixCache

__all__ = ["EngineCounters", "TokenRate", "render_metrics"]


class TokenRate:
    """Generated tokens per second over the last ``window_s`` seconds.

    Args:
        window_s: length of the sliding window.
    """

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._events: collections.deque[tuple[float, int]] = collections.deque()
        self._lock = threading.Lock()

    def add(self, tokens: int, now: float | None = None) -> None:
        """Record ``tokens`` generated at ``now`` (default: the monotonic clock)."""
        stamp = time.monotonic() if now is None else now
        with self._lock:
            self._events.append((stamp, tokens))
            self._trim(stamp)

    def per_second(self, now: float | None = None) -> float:
        """Tokens per second over the window ending at ``now``; 0 when nothing was generated."""
        stamp = time.monotonic() if now is None else now
        with self._lock:
            self._trim(stamp)
            total = sum(n for _, n in self._events)
        return total / self.window_s

    def _trim(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window_s:
            self._events.popleft()


@dataclass
class EngineCounters:
    """What the batching loop counts: tokens, forward passes, decoded rows, admission waits.

    Attributes:
        prefill_chunks: forward passes of prefills (a long prompt takes several per prefill).
        decode_rows: sequences summed over decode passes (per pass: the batch it decoded).
        queue_wait_s: seconds admitted requests waited in the queue, summed.
        admitted_requests: requests admitted into the running batch.
    """

    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_passes: int = 0
    prefill_chunks: int = 0
    decode_passes: int = 0
    decode_rows: int = 0
    queue_wait_s: float = 0.0
    admitted_requests: int = 0
    rate: TokenRate = field(default_factory=TokenRate)


def _line(name: str, kind: str, help_text: str, value: float) -> str:
    text = str(value) if isinstance(value, int) else repr(float(value))
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n{name} {text}\n"


def render_metrics(
    counters: EngineCounters,
    *,
    waiting: int,
    running: int,
    policy_version: int,
    prefix_cache: PrefixCache | None,
    bfloat16: bool = False,
    threads: int = 1,
    max_batch: int = 0,
    kv_tokens: int = 0,
    kv_budget_tokens: int = 0,
    kv_bytes_per_token: int = 0,
) -> str:
    """Render the counters and gauges in the Prometheus text exposition format."""
    p = "fulmen_engine_"
    out = [
        _line(p + "bfloat16", "gauge", "1 when weights and KV cache are bfloat16.", int(bfloat16)),
        _line(p + "threads", "gauge", "Torch threads the batching thread computes with.", threads),
        _line(p + "max_batch", "gauge", "Most sequences decoded together.", max_batch),
        _line(p + "queue_length", "gauge", "Requests waiting for admission.", waiting),
        _line(
            p + "kv_tokens",
            "gauge",
            "KV columns the running batch holds (rows x widest row, padding included).",
            kv_tokens,
        ),
        _line(
            p + "kv_budget_tokens",
            "gauge",
            "Most KV columns the running batch may reach; requests wait beyond it.",
            kv_budget_tokens,
        ),
        _line(
            p + "kv_bytes_per_token",
            "gauge",
            "Bytes of keys and values per KV column over every layer.",
            kv_bytes_per_token,
        ),
        _line(p + "running_sequences", "gauge", "Sequences in the running batch.", running),
        _line(p + "policy_version", "gauge", "Current policy (weights) version.", policy_version),
        _line(
            p + "prompt_tokens_total", "counter", "Prompt tokens admitted.", counters.prompt_tokens
        ),
        _line(
            p + "generation_tokens_total",
            "counter",
            "Tokens generated.",
            counters.generated_tokens,
        ),
        _line(
            p + "generation_tokens_per_second",
            "gauge",
            f"Tokens generated per second over the last {counters.rate.window_s:g} s.",
            counters.rate.per_second(),
        ),
        _line(
            p + "prefill_passes_total",
            "counter",
            "Prefill forward passes.",
            counters.prefill_passes,
        ),
        _line(
            p + "prefill_chunks_total",
            "counter",
            "Forward passes of prefills (long prompts take several chunks).",
            counters.prefill_chunks,
        ),
        _line(
            p + "decode_passes_total", "counter", "Decode forward passes.", counters.decode_passes
        ),
        _line(
            p + "decode_rows_total",
            "counter",
            "Sequences summed over decode passes (over decode_passes_total: the mean batch).",
            counters.decode_rows,
        ),
        _line(
            p + "queue_wait_seconds_total",
            "counter",
            "Seconds admitted requests waited for admission, summed.",
            counters.queue_wait_s,
        ),
        _line(
            p + "admitted_requests_total",
            "counter",
            "Requests admitted into the running batch.",
            counters.admitted_requests,
        ),
        _line(
            p + "prefix_cache_enabled",
            "gauge",
            "1 when the prefix cache is on.",
            int(prefix_cache is not None),
        ),
    ]
    if prefix_cache is not None:
        s = prefix_cache.stats
        out += [
            _line(
                p + "prefix_cache_hit_tokens_total",
                "counter",
                "Prompt tokens whose KV came from the prefix cache.",
                s.hit_tokens,
            ),
            _line(
                p + "prefix_cache_miss_tokens_total",
                "counter",
                "Prompt tokens computed (not served from the prefix cache).",
                s.miss_tokens,
            ),
            _line(p + "prefix_cache_blocks", "gauge", "Cached blocks.", prefix_cache.blocks),
            _line(p + "prefix_cache_bytes", "gauge", "Bytes of cached KV.", prefix_cache.bytes),
            _line(
                p + "prefix_cache_max_bytes",
                "gauge",
                "Bound on cached KV bytes.",
                prefix_cache.max_bytes,
            ),
            _line(
                p + "prefix_cache_evicted_blocks_total",
                "counter",
                "Blocks evicted to stay under the bound.",
                s.evicted_blocks,
            ),
            _line(
                p + "prefix_cache_invalidated_blocks_total",
                "counter",
                "Blocks dropped because the weights they were computed with changed.",
                s.invalidated_blocks,
            ),
        ]
    return "".join(out)
