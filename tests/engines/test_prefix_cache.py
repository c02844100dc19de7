"""The prefix cache: the trie's reference counts and eviction, and the batching loop with it on.

With the cache on, greedy outputs are identical to cache-off and logprobs match within
``TOLERANCE`` (measured max difference on the tiny model, float32: 3.6e-6), including after an
adapter is replaced in place: KV computed under the old adapter is never served.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from fulmen.engines.builtin.batching import Scheduler
from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.builtin.prefix_cache import PrefixCache
from fulmen.engines.builtin.sampling import SamplingParams
from fulmen.engines.builtin.sequence import Job, JobFailed, JobStarted, TokenEvent

TOLERANCE = 1e-4
SYSTEM = (
    "You answer arithmetic questions. Question: Ann has 12 stickers and gets 5 more. "
    "CALC(12 + 5) RESULT: 17 ANSWER: 17. Question: A box holds 6 rows of 4 eggs. "
    "CALC(6 * 4) RESULT: 24 ANSWER: 24. Question: "
)
QUESTIONS = [
    "Tom has 3 apples.",
    "What is 7 times 8?",
    "A train leaves at noon and travels 60 miles.",
    "x",
    "There are 9 cats and 4 dogs in the house today.",
    "Sum 1 2 3",
]


def _kv(layers: int, tokens: int, fill: float = 1.0) -> torch.Tensor:
    return torch.full((layers, 2, 1, tokens, 4), fill)


def _hit(cache: PrefixCache, namespace: object, tokens: list[int]) -> int:
    """Cached tokens of a whole-prompt lookup (released at once)."""
    found = cache.match(namespace, tokens, limit=len(tokens))
    count = found.tokens
    found.release()
    return count


# --- the trie ----------------------------------------------------------------------------------


def test_match_returns_the_longest_cached_whole_block_prefix() -> None:
    cache = PrefixCache(max_bytes=1 << 20, block_size=4)
    tokens = list(range(10))
    assert cache.insert("ns", tokens, _kv(2, 10)) == 2  # only whole blocks
    hit = cache.match("ns", [*range(8), 99, 98], limit=10)
    assert hit.tokens == 8
    assert hit.kv(6).shape == (2, 2, 1, 6, 4)
    hit.release()
    partial = cache.match("ns", [0, 1, 2, 3, 4, 5, 6, 7], limit=7)  # the last token is computed
    assert partial.tokens == 4
    partial.release()
    assert _hit(cache, "ns", [0, 1, 2, 9]) == 0
    assert _hit(cache, "other", tokens) == 0  # namespaces never mix


def test_insert_with_offset_extends_a_cached_prefix() -> None:
    cache = PrefixCache(max_bytes=1 << 20, block_size=4)
    cache.insert("ns", list(range(4)), _kv(1, 4, 1.0))
    assert cache.insert("ns", list(range(12)), _kv(1, 8, 2.0), offset=4) == 2
    hit = cache.match("ns", list(range(12)), limit=12)
    assert hit.tokens == 12
    kv = hit.kv(12)
    hit.release()
    assert kv[0, 0, 0, :4, 0].tolist() == [1.0] * 4 and kv[0, 0, 0, 4:, 0].tolist() == [2.0] * 8
    # a prefix that is not cached cannot be skipped with an offset
    assert cache.insert("ns", [50, 51, 52, 53, 54, 55, 56, 57], _kv(1, 4), offset=4) == 0


def test_eviction_keeps_the_bound_and_spares_referenced_blocks() -> None:
    block_bytes = _kv(1, 4).numel() * 4
    cache = PrefixCache(max_bytes=3 * block_bytes, block_size=4)
    cache.insert("ns", list(range(8)), _kv(1, 8))  # two blocks: a chain
    pinned = cache.match("ns", list(range(8)), limit=8)
    cache.insert("ns", [100, 101, 102, 103, 104, 105, 106, 107], _kv(1, 8))  # 4 blocks > 3
    assert cache.bytes <= cache.max_bytes
    assert cache.stats.evicted_blocks == 1
    # the pinned chain survived; the newer unpinned chain lost its leaf
    assert _hit(cache, "ns", list(range(8))) == 8
    assert _hit(cache, "ns", list(range(100, 108))) == 4
    pinned.release()
    for start in (200, 300, 400):  # newer prompts push the released chain out, leaves first
        cache.insert("ns", list(range(start, start + 4)), _kv(1, 4))
    assert cache.bytes <= cache.max_bytes
    assert _hit(cache, "ns", list(range(8))) == 0


def test_invalidate_drops_only_the_selected_namespaces() -> None:
    cache = PrefixCache(max_bytes=1 << 20, block_size=4)
    cache.insert(("a", 1), list(range(8)), _kv(1, 8))
    cache.insert((None, 0), list(range(8)), _kv(1, 8))
    assert cache.invalidate(lambda ns: ns == ("a", 1)) == 2
    assert _hit(cache, ("a", 1), list(range(8))) == 0
    assert _hit(cache, (None, 0), list(range(8))) == 8
    cache.invalidate()
    assert cache.blocks == 0 and cache.bytes == 0


# --- the batching loop with the cache ------------------------------------------------------


class Collector:
    """Tokens and logprobs of one single-choice job."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.version: int | None = None
        self.done = threading.Event()

    def __call__(self, event: JobStarted | JobFailed | TokenEvent) -> None:
        if isinstance(event, JobStarted):
            self.version = event.policy_version
        elif isinstance(event, JobFailed):
            self.done.set()
        else:
            self.tokens.append(event.token_id)
            self.logprobs.append(event.logprob)
            if event.finish_reason is not None:
                self.done.set()


@pytest.fixture(scope="module")
def model(tiny_dir: Path) -> ServedModel:
    torch.set_num_threads(2)
    return ServedModel(tiny_dir, served_name="tiny")


@pytest.fixture
def schedulers(model: ServedModel) -> Iterator[tuple[Scheduler, Scheduler]]:
    """A cache-on and a cache-off scheduler over the same weights."""
    on = Scheduler(model, max_batch=4, prefix_cache=PrefixCache(max_bytes=64 << 20, block_size=8))
    off = Scheduler(model, max_batch=4)
    on.start()
    off.start()
    yield on, off
    on.close()
    off.close()


def run(
    s: Scheduler,
    prompts: list[list[int]],
    *,
    max_tokens: int = 12,
    adapter: str | None = None,
    stagger: float = 0.002,
) -> list[Collector]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    collectors = []
    for ids in prompts:  # staggered: later prompts join a running batch
        c = Collector()
        s.submit(Job(ids, params, adapter, 1, c))
        collectors.append(c)
        time.sleep(stagger)
    for c in collectors:
        assert c.done.wait(60)
    return collectors


def assert_same(a: list[Collector], b: list[Collector]) -> float:
    assert [c.tokens for c in a] == [c.tokens for c in b]
    pairs = zip(a, b, strict=True)
    gap = max(abs(x - y) for ca, cb in pairs for x, y in zip(ca.logprobs, cb.logprobs, strict=True))
    print(f"max |cache on - cache off| logprob: {gap:.2e}")
    assert gap < TOLERANCE
    return gap


def test_cached_prefixes_give_the_same_greedy_outputs_and_logprobs(
    model: ServedModel, schedulers: tuple[Scheduler, Scheduler]
) -> None:
    on, off = schedulers
    cache = on.prefix_cache
    assert cache is not None
    prompts = [model.tokenizer.encode(SYSTEM + q, add_special_tokens=False) for q in QUESTIONS]
    warm = run(on, prompts[:1])  # fills the cache with the shared prefix
    assert cache.stats.hit_tokens == 0
    reference = run(off, prompts)
    cached = run(on, prompts)
    assert_same(cached, reference)
    assert warm[0].tokens == reference[0].tokens
    shared = len(model.tokenizer.encode(SYSTEM, add_special_tokens=False))
    # every later prompt reused at least the whole blocks of the shared prefix
    assert cache.stats.hit_tokens >= len(prompts) * (shared - 2 * cache.block_size)
    assert cache.stats.miss_tokens < sum(len(p) for p in prompts) // 2 + len(prompts[0])

    # a second turn extends prompt + output: the output's blocks are cached too
    turn = prompts[2] + reference[2].tokens + model.tokenizer.encode(" RESULT: 480 ANSWER:")
    hits = cache.stats.hit_tokens
    assert_same(run(on, [turn]), run(off, [turn]))
    assert cache.stats.hit_tokens - hits > len(prompts[2])


def test_a_replaced_adapter_never_gets_kv_of_the_old_one(
    model: ServedModel,
    schedulers: tuple[Scheduler, Scheduler],
    tool_adapter: Path,
    tmp_path: Path,
) -> None:
    from safetensors.torch import load_file, save_file

    on, off = schedulers
    cache = on.prefix_cache
    assert cache is not None
    halved = tmp_path / "halved"
    shutil.copytree(tool_adapter, halved)
    weights = load_file(str(halved / "adapter_model.safetensors"))
    save_file(
        {k: v * 0.5 if "lora_B" in k else v for k, v in weights.items()},
        str(halved / "adapter_model.safetensors"),
    )
    prompts = [model.tokenizer.encode(SYSTEM + q, add_special_tokens=False) for q in QUESTIONS]
    on.update(lambda: model.load_adapter("t", str(tool_adapter)), touches="t").result(60)
    try:
        first = run(on, prompts[:3], adapter="t")  # cache KV under the first adapter
        base_before = run(on, prompts[:1])
        blocks = cache.blocks
        on.update(lambda: model.load_adapter("t", str(halved)), touches="t").result(60)
        assert cache.stats.invalidated_blocks > 0 and cache.blocks < blocks
        after = run(on, prompts[:3], adapter="t")  # later ones hit KV of the first, new weights
        reference = run(off, prompts[:3], adapter="t")  # the same (new) weights, no cache
        assert_same(after, reference)
        # the first token depends on the prompt's KV only: the new adapter changed it
        assert (
            max(abs(a.logprobs[0] - b.logprobs[0]) for a, b in zip(after, first, strict=True))
            > 1e-3
        )
        # base-model KV was not touched by the adapter update and is still served
        hits = cache.stats.hit_tokens
        assert_same(run(on, prompts[:1]), base_before)
        assert cache.stats.hit_tokens > hits
    finally:
        on.update(lambda: model.unload_adapter("t"), touches="t").result(60)


def test_outputs_stay_exact_while_a_small_bound_evicts(model: ServedModel) -> None:
    per_token = 2 * 2 * 2 * 32 * 4  # layers * (k, v) * kv heads * head dim * float32 bytes
    cache = PrefixCache(max_bytes=40 * per_token, block_size=8)  # five blocks
    small = Scheduler(model, max_batch=4, prefix_cache=cache)
    off = Scheduler(model, max_batch=4)
    small.start()
    off.start()
    try:
        prompts = [
            model.tokenizer.encode(f"{q} {SYSTEM}", add_special_tokens=False) for q in QUESTIONS
        ]
        assert_same(run(small, prompts * 2, stagger=0.02), run(off, prompts * 2, stagger=0.02))
        assert cache.stats.evicted_blocks > 0
        assert cache.bytes <= cache.max_bytes
    finally:
        small.close()
        off.close()


@pytest.fixture(scope="module")
def sliding_model(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> ServedModel:
    """A small random Gemma 3 with a 16-token sliding window on two of its three layers."""
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    target = tmp_path_factory.mktemp("gemma3-sliding")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    tokenizer.save_pretrained(str(target))
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        sliding_window=16,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(3)
    Gemma3ForCausalLM(config).save_pretrained(str(target))
    return ServedModel(target, served_name="sliding")


def test_sliding_window_layers_see_the_same_tokens_with_the_cache(
    sliding_model: ServedModel,
) -> None:
    """Prompts several windows long, batched with different cached lengths (Gemma 3 layout)."""
    on = Scheduler(
        sliding_model, max_batch=4, prefix_cache=PrefixCache(max_bytes=16 << 20, block_size=8)
    )
    off = Scheduler(sliding_model, max_batch=4)
    on.start()
    off.start()
    try:
        encode = sliding_model.tokenizer.encode
        prompts = [encode(SYSTEM + q, add_special_tokens=False) for q in QUESTIONS]
        assert min(len(p) for p in prompts) > 4 * 16
        run(on, prompts[:1])
        cached = run(on, prompts, max_tokens=20)
        assert_same(cached, run(off, prompts, max_tokens=20))
        assert on.prefix_cache is not None and on.prefix_cache.stats.hit_tokens > 5 * 64
    finally:
        on.close()
        off.close()
