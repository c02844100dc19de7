"""The batching loop in-process: shared forward passes, exact results, update ordering."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from fulmen.engines.builtin.batching import ALL_WEIGHTS, Scheduler
from fulmen.engines.builtin.model import ServedModel
from fulmen.engines.builtin.sampling import SamplingParams
from fulmen.engines.builtin.sequence import Job, JobFailed, JobStarted, TokenEvent

PROMPTS = [
    "Hello world",
    "What is 2 + 2? Tell me now",
    "a",
    "SELECT name FROM t1;",
    "The quick brown fox jumps over",
    "x y z",
    "one two three four five six",
    "Q",
]


class Collector:
    """Gathers the events of one job, like the server's queue does."""

    def __init__(self, n: int = 1) -> None:
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.version: int | None = None
        self.error: JobFailed | None = None
        self.done = threading.Event()
        self._left = n

    def __call__(self, event: JobStarted | JobFailed | TokenEvent) -> None:
        if isinstance(event, JobStarted):
            self.version = event.policy_version
        elif isinstance(event, JobFailed):
            self.error = event
            self.done.set()
        else:
            self.tokens[event.index].append(event.token_id)
            if event.finish_reason is not None:
                self._left -= 1
                if self._left == 0:
                    self.done.set()


@pytest.fixture(scope="module")
def model(tiny_dir: Path) -> ServedModel:
    torch.set_num_threads(2)
    return ServedModel(tiny_dir, served_name="tiny")


@pytest.fixture
def scheduler(model: ServedModel) -> Iterator[Scheduler]:
    s = Scheduler(model, max_batch=4)
    s.start()
    yield s
    s.close()


def greedy(model: ServedModel, ids: list[int], n: int) -> list[int]:
    out = model.base.generate(
        torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[0, len(ids) :].tolist()


def submit(
    s: Scheduler, ids: list[int], params: SamplingParams, adapter: str | None = None, n: int = 1
) -> Collector:
    c = Collector(n)
    s.submit(Job(ids, params, adapter, n, c))
    return c


def test_staggered_requests_share_forward_passes_and_match_generate(
    model: ServedModel, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [model.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]
    expected = [greedy(model, p, 24) for p in ids]
    calls: list[int] = []
    forward = model.forward

    def counting(input_ids: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        calls.append(input_ids.shape[0])
        return forward(input_ids, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(model, "forward", counting)
    params = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    collectors = []
    for p in ids:  # arrive while others are running: they join the batch mid-flight
        collectors.append(submit(scheduler, p, params))
        time.sleep(0.002)
    for c in collectors:
        assert c.done.wait(60)
    assert [c.tokens[0] for c in collectors] == expected
    assert max(calls) == 4  # max_batch rows decoded together
    assert len(calls) < len(PROMPTS) * 24 / 2  # far fewer passes than tokens


def test_seeded_sampling_does_not_depend_on_the_batch(
    model: ServedModel, scheduler: Scheduler
) -> None:
    ids = model.tokenizer.encode("Once upon a time", add_special_tokens=False)
    params = SamplingParams(max_tokens=16, temperature=0.9, top_p=0.95, seed=5, ignore_eos=True)
    alone = submit(scheduler, ids, params, n=2)
    assert alone.done.wait(60)
    noise = [
        submit(scheduler, ids[:2], SamplingParams(max_tokens=30, temperature=1.0)) for _ in range(2)
    ]
    crowded = submit(scheduler, ids, params, n=2)
    assert crowded.done.wait(60) and all(c.done.wait(60) for c in noise)
    assert crowded.tokens == alone.tokens
    assert alone.tokens[0] != alone.tokens[1]


def test_full_reload_waits_for_running_requests(
    model: ServedModel, scheduler: Scheduler, perturbed_dir: Path
) -> None:
    ids = model.tokenizer.encode("Hello world", add_special_tokens=False)
    expected_old = greedy(model, ids, 120)
    v0 = model.version
    running = submit(scheduler, ids, SamplingParams(max_tokens=120, temperature=0, ignore_eos=True))
    while running.version is None:
        time.sleep(0.001)
    future = scheduler.update(lambda: model.reload_weights(str(perturbed_dir)), touches=ALL_WEIGHTS)
    later = submit(scheduler, ids, SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
    assert running.done.wait(60) and later.done.wait(60)
    try:
        assert future.result(10) == v0 + 1
        assert running.version == v0 and running.tokens[0] == expected_old  # one policy
        assert later.version == v0 + 1
        assert later.tokens[0] == greedy(model, ids, 8) != expected_old[:8]
    finally:
        scheduler.update(lambda: model.reload_weights(None), touches=ALL_WEIGHTS).result(60)


def test_adapter_for_other_requests_loads_without_draining(
    model: ServedModel, scheduler: Scheduler, tool_adapter: Path
) -> None:
    ids = model.tokenizer.encode("Hello world", add_special_tokens=False)
    expected = greedy(model, ids, 50)  # before the load: peft patches the base modules
    running = submit(scheduler, ids, SamplingParams(max_tokens=400, temperature=0, ignore_eos=True))
    while running.version is None:
        time.sleep(0.001)
    version = scheduler.update(lambda: model.load_adapter("t", str(tool_adapter)), touches="t")
    try:
        version.result(30)
        assert not running.done.is_set()  # applied between steps, not after the drain
        assert running.done.wait(60)
        assert running.tokens[0][:50] == expected  # base rows ignore the adapter
        mixed = submit(scheduler, ids, SamplingParams(max_tokens=6, temperature=0), adapter="t")
        assert mixed.done.wait(60) and mixed.version == version.result()
    finally:
        scheduler.update(lambda: model.unload_adapter("t"), touches="t").result(30)


def test_unknown_adapter_at_admission_fails_the_job(
    model: ServedModel, scheduler: Scheduler
) -> None:
    c = submit(scheduler, [5, 6], SamplingParams(max_tokens=2), adapter="gone")
    assert c.done.wait(10)
    assert c.error is not None and c.error.error.status == 404
