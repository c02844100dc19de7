"""Equivalence classes of the training step, pinned on a tiny model with a fixed seed."""

from __future__ import annotations

import pytest
import torch

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.transitions import TransitionOptions, build_trajectory
from tests.transitions.factories import call, reward_span

from .builders import gradient, model_logprobs, transition
from .models import tiny_llama


def _chain_calls(engine: GRPOUpdater, rollout: str, seed: int):
    """Three calls whose prompts extend each other token-exactly, logprobs from the model."""
    gen = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> list[int]:
        return torch.randint(3, 64, (n,), generator=gen).tolist()

    prompt = [1, *tokens(4)]
    calls = []
    for seq in (1, 2, 3):
        completion = tokens(3 + seq)
        lps = model_logprobs(engine.model, prompt, completion)
        calls.append(call(seq, prompt, completion, logprobs=lps, rollout_id=rollout))
        prompt = prompt + completion + tokens(2)  # the observation before the next call
    return calls


@pytest.mark.parametrize("normalization", ["token", "rollout"])
@pytest.mark.parametrize("credit", ["final", "discounted"])
def test_per_call_and_merged_transitions_give_the_same_loss_and_gradient(
    normalization: str, credit: str
) -> None:
    config = GRPOConfig(
        finetune="full", loss_normalization=normalization, kl_coef=0.05, learning_rate=1e-3
    )
    engine = GRPOUpdater(tiny_llama(), config=config)
    results = {}
    records = {
        r: (_chain_calls(engine, r, seed), [reward_span(9, reward, rollout_id=r)])
        for r, seed, reward in (("a", 1, 1.0), ("b", 2, 0.0), ("c", 3, 0.5))
    }
    for merge in (False, True):
        options = TransitionOptions(
            merge=merge, credit=credit, gamma=0.5 if credit != "final" else None
        )
        transitions = [
            t
            for r, (calls, spans) in records.items()
            for t in build_trajectory(
                rollout_id=r, task_id="task", calls=calls, spans=spans, options=options
            ).transitions
        ]
        assert len(transitions) == (3 if merge else 9)
        metrics = engine.compute_gradients(transitions)
        results[merge] = (
            metrics["loss"],
            gradient(engine.model).clone(),
            metrics["trained_tokens"],
        )
        engine.optimizer.zero_grad(set_to_none=True)
    (loss_a, grad_a, n_a), (loss_b, grad_b, n_b) = results[False], results[True]
    assert n_a == n_b
    assert loss_a == pytest.approx(loss_b, abs=1e-6)
    assert float(grad_a.abs().sum()) > 0
    torch.testing.assert_close(grad_a, grad_b, atol=1e-6, rtol=1e-4)


def test_one_micro_batch_of_eight_equals_eight_of_one() -> None:
    model = tiny_llama(seed=1)
    gen = torch.Generator().manual_seed(5)
    batch = []
    for i in range(8):
        prompt = [1, *torch.randint(3, 64, (2 + i % 3,), generator=gen).tolist()]
        completion = torch.randint(3, 64, (3 + i % 4,), generator=gen).tolist()
        batch.append(transition(model, f"r{i}", prompt, completion, float(i % 3), task=f"t{i % 2}"))
    grads = {}
    for budget in (10_000, 1):
        engine = GRPOUpdater(
            tiny_llama(seed=1),
            config=GRPOConfig(micro_batch_tokens=budget, kl_coef=0.1, loss_normalization="rollout"),
        )
        metrics = engine.compute_gradients(batch)
        assert metrics["micro_batches"] == (1 if budget > 1 else 8)
        grads[budget] = gradient(engine.model)
    assert float(grads[1].abs().sum()) > 0
    torch.testing.assert_close(grads[10_000], grads[1], atol=1e-7, rtol=1e-4)


def test_a_rollout_with_three_calls_weighs_the_same_as_one_with_one_call() -> None:
    model = tiny_llama(seed=2)
    prompt, completion = [1, 5, 6, 7], [8, 9, 10]
    batch = [transition(model, "many", prompt, completion, 1.0, call_index=i) for i in range(3)]
    batch.append(transition(model, "one", prompt, completion, 0.0))
    norms = {}
    for normalization in ("rollout", "token"):
        engine = GRPOUpdater(
            tiny_llama(seed=2),
            config=GRPOConfig(finetune="full", loss_normalization=normalization),
        )
        engine.compute_gradients(batch)
        norms[normalization] = float(gradient(engine.model).abs().max())
    # Per rollout: +A on "many" (3 copies, each 1/3) and -A on "one" cancel exactly.
    assert norms["token"] > 1e-3
    assert norms["rollout"] < 1e-4 * norms["token"]
