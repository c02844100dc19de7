"""Long prompts through the built-in engine: 32k tokens in chunks, exact, prefix reused, bounded.

The ``tiny-long`` model (64k positions, one sliding-window and one global layer) runs the
batching loop in this process. A 32k-token prompt is served with no single allocation near
an attention matrix (the engine before chunked prefill and blockwise attention would hold a
``[queries x 32k]`` score matrix per layer); chunked prefill, a cached prefix, sliding windows
crossing chunk borders and left-padded rows give the tokens and logprobs of a one-pass
transformers reference; the KV budget holds requests back; a prompt over the context is a 400
that names it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
import torch

from fulmen.engines.builtin.batching import Scheduler
from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.builtin.prefix_cache import PrefixCache
from fulmen.engines.builtin.sampling import SamplingParams
from fulmen.engines.builtin.sequence import Job, JobFailed, JobStarted, TokenEvent
from fulmen.engines.launcher import EngineProcess
from fulmen.engines.models import resolve_model

MiB = 1 << 20
_T = TypeVar("_T")


class Collector:
    """The events of one job: tokens and logprobs per choice, or the failure."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.error: JobFailed | None = None
        self.started = threading.Event()
        self.done = threading.Event()

    def __call__(self, event: JobStarted | JobFailed | TokenEvent) -> None:
        if isinstance(event, JobStarted):
            self.started.set()
        elif isinstance(event, JobFailed):
            self.error = event
            self.done.set()
        else:
            self.tokens.append(event.token_id)
            self.logprobs.append(event.logprob)
            if event.finish_reason is not None:
                self.done.set()


class _Recording(threading.Event):
    """An event that runs ``action`` when it is set (on the setting thread)."""

    def __init__(self, action: object) -> None:
        super().__init__()
        self._action = action

    def set(self) -> None:
        self._action()  # type: ignore[operator]
        super().set()


@pytest.fixture(scope="module")
def model() -> Iterator[ServedModel]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on a shared 2-core machine only contend
    yield ServedModel(resolve_model("tiny-long"), served_name="tiny-long")
    torch.set_num_threads(threads)


def prompt(length: int, salt: int = 0) -> list[int]:
    """Token ids of a deterministic prompt (ordinary tokens of the tiny vocabulary)."""
    return [(i * 7919 + salt * 104729) % 900 + 10 for i in range(length)]


def run(scheduler: Scheduler, ids: list[int], max_tokens: int = 4) -> Collector:
    collector = Collector()
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True, logprobs=True)
    scheduler.submit(Job(ids, params, None, 1, collector))
    return collector


def reference(
    path: Path, prompts: list[list[int]], steps: int
) -> list[tuple[list[int], list[float]]]:
    """Greedy tokens and logprobs from transformers' eager attention, the whole sequence a pass."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()
    out: list[tuple[list[int], list[float]]] = []
    for ids in prompts:
        tokens: list[int] = []
        logprobs: list[float] = []
        sequence = list(ids)
        with torch.no_grad():
            for _ in range(steps):
                logits = model(input_ids=torch.tensor([sequence]), logits_to_keep=1).logits
                scores = torch.log_softmax(logits[0, -1].float(), dim=-1)
                token = int(scores.argmax())
                tokens.append(token)
                logprobs.append(float(scores[token]))
                sequence.append(token)
        out.append((tokens, logprobs))
    return out


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def peak_growth(work: Callable[[], _T]) -> tuple[int, _T]:
    """Run ``work()``; return how far this process's peak resident memory rose above its start.

    Linux resets the peak (``VmHWM``) on writing 5 to ``/proc/self/clear_refs``; every thread
    counts, the batching thread's forward passes included.
    """
    Path("/proc/self/clear_refs").write_text("5")
    start = _status_kib("VmRSS")
    result = work()
    return (_status_kib("VmHWM") - start) * 1024, result


@pytest.mark.slow
def test_a_32k_token_prompt_is_served_in_chunks_and_its_prefix_reused(model: ServedModel) -> None:
    cache = PrefixCache(max_bytes=64 * MiB)
    scheduler = Scheduler(model, max_batch=2, prefill_chunk_tokens=2048, prefix_cache=cache)
    scheduler.start()
    try:
        long = prompt(32_000)

        def first() -> Collector:
            c = run(scheduler, long)
            assert c.done.wait(300)
            return c

        grown, served = peak_growth(first)
        assert served.error is None
        assert len(served.tokens) == 4 and all(math.isfinite(x) for x in served.logprobs)
        # 16 chunks of 2048 tokens. The KV cache is 32 MiB; a [queries x keys] score matrix of
        # one chunk alone would be 2048 x 32,000 x 2 heads x 4 bytes = 500 MiB (and its
        # softmax as much again).
        assert scheduler.counters.prefill_chunks == math.ceil(32_000 / 2048)
        assert grown < 384 * MiB, f"the peak rose by {grown / MiB:.0f} MiB"
        # The same 32k-token prefix again, with a new ending: its KV comes from the cache.
        hits = cache.stats.hit_tokens
        again = run(scheduler, [*long, *prompt(64, salt=1)])
        assert again.done.wait(120) and again.error is None
        assert cache.stats.hit_tokens - hits >= 32_000 - cache.block_size
        assert scheduler.counters.prefill_chunks == math.ceil(32_000 / 2048) + 1
    finally:
        scheduler.close()


def test_chunked_prefill_with_a_cached_prefix_gives_the_one_pass_result(
    model: ServedModel,
) -> None:
    """Chunks of 200 columns cross the 256-token window; the two rows share one prefill.

    The long prompt's first 1,470 tokens come from the cache, the short one is left-padded
    over them: 930 new columns each, close enough that one forward pass takes both.
    """
    first_part = prompt(1_500)
    long, short = [*first_part, *prompt(900, salt=2)], prompt(930, salt=3)
    expected = reference(model.path, [long, short], 6)
    cache = PrefixCache(max_bytes=64 * MiB)
    scheduler = Scheduler(model, max_batch=2, prefill_chunk_tokens=400, prefix_cache=cache)
    scheduler.start()
    try:
        warm = run(scheduler, first_part, max_tokens=1)  # caches the first 1,488 tokens
        assert warm.done.wait(60)
        chunks = scheduler.counters.prefill_chunks
        collectors = [run(scheduler, ids, max_tokens=6) for ids in (long, short)]
        assert all(c.done.wait(120) for c in collectors)
    finally:
        scheduler.close()
    assert cache.stats.hit_tokens >= 1_470
    assert scheduler.counters.prefill_chunks - chunks == math.ceil(930 / 200)  # one shared prefill
    for collector, (tokens, logprobs) in zip(collectors, expected, strict=True):
        assert collector.error is None
        assert collector.tokens == tokens
        assert collector.logprobs == pytest.approx(logprobs, abs=1e-4)


def test_the_kv_budget_holds_a_request_back_until_there_is_room(model: ServedModel) -> None:
    scheduler = Scheduler(model, max_batch=4, kv_budget_tokens=2_500)
    scheduler.start()
    try:
        params = SamplingParams(max_tokens=150, temperature=0, ignore_eos=True)
        first, second = Collector(), Collector()
        first_done_when_second_started: list[bool] = []
        second.started = _Recording(
            lambda: first_done_when_second_started.append(first.done.is_set())
        )
        scheduler.submit(Job(prompt(1_200), params, None, 1, first))
        assert first.started.wait(60)
        # 2 rows x (1,200 + 150) columns = 2,700 > 2,500: it waits for the first to finish.
        scheduler.submit(Job(prompt(1_100, salt=4), params, None, 1, second))
        assert second.done.wait(120)
        assert first_done_when_second_started == [True]
    finally:
        scheduler.close()
    assert len(first.tokens) == len(second.tokens) == 150


def test_a_prompt_over_the_context_is_a_400_naming_the_context(engine: EngineProcess) -> None:
    models = httpx.get(f"{engine.base_url}/models", timeout=30).json()["data"]
    context = int(models[0]["max_model_len"])
    response = httpx.post(
        f"{engine.base_url}/completions",
        json={"model": "tiny", "prompt": prompt(context + 10), "max_tokens": 4},
        timeout=120,
    )
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert f"maximum context length is {context} tokens" in message
    if engine.capabilities.policy_version:  # the built-in engine also names the prompt's length
        assert f"your prompt is {context + 10} tokens long" in message
