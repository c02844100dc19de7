"""Long sequences in the GRPO updater: a 32k-token transition trains, lengths are reported.

A 32k-token transition of the ``tiny-long`` model (64k positions) takes an update within a
bounded rise of memory; the length limit is the model's context unless set; a micro-batch over
the token budget recomputes its activations in the backward (and only then), with the same
gradient; a transition dropped for length is logged with its length; a stop request ends an
update at the next layer without touching the weights.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import torch

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.diagnose import no_update_reason
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.algorithms.stopping import UpdateStopped, stop_scope
from fulmen.engines.models import resolve_model

from .builders import transition
from .models import tiny_llama

MiB = 1 << 20
_T = TypeVar("_T")


@pytest.fixture
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on a shared 2-core machine only contend
    yield
    torch.set_num_threads(threads)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def peak_growth(work: Callable[[], _T]) -> tuple[int, _T]:
    """Run ``work()``; return how far the peak resident memory rose above the start (bytes)."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak
    start = _status_kib("VmRSS")
    result = work()
    return (_status_kib("VmHWM") - start) * 1024, result


def ids(length: int, salt: int = 0) -> list[int]:
    return [(i * 7919 + salt * 104729) % 900 + 10 for i in range(length)]


def lora(engine: GRPOUpdater) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in engine.model.named_parameters() if "lora_" in n}


@pytest.mark.slow
def test_a_32k_token_transition_trains(one_thread: None, caplog: pytest.LogCaptureFixture) -> None:
    engine = GRPOUpdater.from_pretrained(
        resolve_model("tiny-long"), config=GRPOConfig(learning_rate=1e-3)
    )
    assert engine.config.max_seq_len == 65_536  # the model's context: nothing is dropped
    long = transition(None, "long", ids(31_936), ids(64, salt=1), 1.0)
    short = transition(None, "short", ids(200, salt=2), ids(64, salt=3), 0.0)
    before = lora(engine)
    with caplog.at_level(logging.INFO, logger="fulmen.algorithms.grpo.updater"):
        grown, metrics = peak_growth(lambda: engine.train_step([long, short]))
    assert metrics["updated"] == 1.0 and metrics["trained_tokens"] == 128
    assert metrics["micro_batches"] == 2.0 and metrics["grad_norm"] > 0
    assert any(not torch.equal(before[n], p) for n, p in lora(engine).items())
    assert "activations recomputed in the backward" in caplog.text
    # Held whole, one [32k x 32k] boolean mask per layer type is 1 GiB, and one layer's
    # saved activations for 32k tokens about 140 MiB: the update stays far below.
    assert grown < 768 * MiB, f"the peak rose by {grown / MiB:.0f} MiB"


def test_max_seq_len_is_the_models_context_unless_set() -> None:
    assert GRPOUpdater(tiny_llama()).config.max_seq_len == 128
    assert GRPOUpdater(tiny_llama(), config=GRPOConfig(max_seq_len=40)).config.max_seq_len == 40


def test_only_a_micro_batch_over_the_budget_recomputes_and_the_gradient_is_the_same() -> None:
    batch = [
        transition(None, "long", ids(90), ids(8, salt=1), 1.0),
        transition(None, "a", ids(10, salt=2), ids(8, salt=3), 0.0),
        transition(None, "b", ids(12, salt=4), ids(8, salt=5), 0.0),
    ]
    gradients: dict[str, torch.Tensor] = {}
    for setting in (None, True, False):
        engine = GRPOUpdater(
            tiny_llama(vocab=1024),
            config=GRPOConfig(micro_batch_tokens=64, gradient_checkpointing=setting),
        )
        layer = engine.model.get_base_model().model.layers[0]
        seen: list[tuple[int, bool]] = []  # (tokens, recomputed) per forward of the layer

        def record(
            module: torch.nn.Module,
            args: tuple[torch.Tensor, ...],
            seen: list[tuple[int, bool]] = seen,
        ) -> None:
            recompute = bool(module.gradient_checkpointing and module.training)
            seen.append((int(args[0].shape[1]), recompute))

        layer.register_forward_pre_hook(record)
        engine.compute_gradients(batch)
        grads = [p.grad.flatten() for p in engine.model.parameters() if p.grad is not None]
        gradients[str(setting)] = torch.cat(grads)
        if setting is None:  # the 98-token sequence alone is over 64; the two short ones not
            assert sorted(set(seen)) == [(20, False), (98, True)]
        else:
            assert {recompute for _, recompute in seen} == {setting}
    torch.testing.assert_close(gradients["None"], gradients["False"], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(gradients["True"], gradients["False"], rtol=1e-5, atol=1e-7)


def test_a_transition_dropped_for_length_is_reported_with_its_length(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = GRPOUpdater(tiny_llama(vocab=1024), config=GRPOConfig(max_seq_len=50))
    batch = [
        transition(None, "long", ids(52), ids(8, salt=1), 1.0),  # 60 tokens
        transition(None, "a", ids(10, salt=2), ids(8, salt=3), 0.0),
        transition(None, "b", ids(12, salt=4), ids(8, salt=5), 1.0),
    ]
    with caplog.at_level(logging.WARNING, logger="fulmen.algorithms.grpo.updater"):
        metrics = engine.train_step(batch)
    assert metrics["dropped_overlong"] == 1.0 and metrics["dropped_overlong_longest"] == 60.0
    assert metrics["updated"] == 1.0  # the others trained
    assert (
        "1 transition(s) longer than algorithm.grpo.max_seq_len 50 were dropped (lengths 60 "
        "tokens); raise algorithm.grpo.max_seq_len (the model's context is 128 tokens)"
    ) in caplog.text
    alone = engine.train_step(batch[:1])
    assert alone["updated"] == 0.0
    reason = no_update_reason({**alone, "rollouts/finished": 1.0})
    assert "1 longer than grpo.max_seq_len (up to 60 tokens)" in reason


def test_a_stop_request_ends_the_update_at_the_next_layer_without_a_step() -> None:
    engine = GRPOUpdater(tiny_llama(vocab=1024), config=GRPOConfig(learning_rate=1e-2))
    batch = [
        transition(None, "a", ids(20), ids(8, salt=1), 1.0),
        transition(None, "b", ids(20, salt=2), ids(8, salt=3), 0.0),
    ]
    before = lora(engine)
    stop = threading.Event()
    layers = engine.model.get_base_model().model.layers
    # The signal arrives while the first layer computes: the second layer must not run.
    first = layers[0].register_forward_hook(lambda *_: stop.set())
    ran_second: list[bool] = []
    layers[1].register_forward_hook(lambda *_: ran_second.append(True))
    with stop_scope(stop), pytest.raises(UpdateStopped):
        engine.train_step(batch)
    assert ran_second == [] and engine.step == 0
    assert all(torch.equal(before[n], p) for n, p in lora(engine).items())
    assert all(p.grad is None for p in engine.model.parameters())
    first.remove()
    assert engine.train_step(batch)["updated"] == 1.0  # outside the scope nothing stops it
