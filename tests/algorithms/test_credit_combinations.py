"""Every credit strategy x advantage estimator, from call records through the sample builder
and the engine: the discount (and any credit) is applied exactly once.

The expected advantages are the table of ``docs/credit-and-advantages.md``, computed by hand
for two rollouts of one task, three calls each: rollout ``a`` earns 1, rollout ``b`` earns 0
(``per_call``: the rewards the agent emitted per call), gamma 0.5, no std normalization.
"""

from __future__ import annotations

import pytest
import torch

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.samples import build_samples
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.algorithms.policy import token_logprobs
from fulmen.transitions import TransitionOptions, build_trajectory
from fulmen.types.transitions import Transition
from tests.transitions.factories import call, reward_span

from .builders import gradient, model_logprobs
from .models import tiny_llama

GAMMA = 0.5
FINAL = {"a": 1.0, "b": 0.0}
PER_CALL = {"a": (0.0, 0.5, 1.0), "b": (1.0, 0.0, 0.0)}  # the rewards emitted per call

# Per rollout, per call: the advantage every token of that call must get.
# final: A = R - mean(R) = +-0.5, whichever estimator.
# discounted x rollout: A * gamma^(2-k).
# discounted x transition: R * gamma^(2-k) minus the group mean of those rewards, each rollout
#   weighing 1 (a: mean(0.25, 0.5, 1) = 7/12, b: 0, group mean 7/24); no second gamma^(2-k).
# last: only the last call, A = R - mean(R); earlier calls carry no credit.
# per_call x transition: emitted reward minus the group mean (a: 0.5, b: 1/3 -> 5/12).
EXPECTED: dict[tuple[str, str], dict[str, tuple[float, float, float]]] = {
    ("final", "rollout"): {"a": (0.5, 0.5, 0.5), "b": (-0.5, -0.5, -0.5)},
    ("final", "transition"): {"a": (0.5, 0.5, 0.5), "b": (-0.5, -0.5, -0.5)},
    ("discounted", "rollout"): {"a": (0.125, 0.25, 0.5), "b": (-0.125, -0.25, -0.5)},
    ("discounted", "transition"): {
        "a": (0.25 - 7 / 24, 0.5 - 7 / 24, 1.0 - 7 / 24),
        "b": (-7 / 24, -7 / 24, -7 / 24),
    },
    ("last", "rollout"): {"a": (0.0, 0.0, 0.5), "b": (0.0, 0.0, -0.5)},
    ("last", "transition"): {"a": (0.0, 0.0, 0.5), "b": (0.0, 0.0, -0.5)},
    ("per_call", "transition"): {
        "a": (-5 / 12, 0.5 - 5 / 12, 1.0 - 5 / 12),
        "b": (1.0 - 5 / 12, -5 / 12, -5 / 12),
    },
}


def _records(rollout: str, credit: str, model: torch.nn.Module | None = None):
    """Three calls, each prompt extending the previous sequence (so they can merge)."""
    gen = torch.Generator().manual_seed(ord(rollout))

    def tokens(n: int) -> list[int]:
        return torch.randint(3, 64, (n,), generator=gen).tolist()

    prompt = [1, *tokens(3)]
    calls, spans = [], []
    for k in range(3):
        completion = tokens(2 + k)
        lps = model_logprobs(model, prompt, completion) if model is not None else None
        calls.append(call(k + 1, prompt, completion, logprobs=lps, rollout_id=rollout))
        if credit == "per_call":
            response = f"resp-{rollout}-{k + 1}"
            spans.append(
                reward_span(10 + k, PER_CALL[rollout][k], response_id=response, rollout_id=rollout)
            )
        prompt = prompt + completion + tokens(2)
    spans.append(reward_span(20, FINAL[rollout], source="return", rollout_id=rollout))
    return calls, spans


def _transitions(
    credit: str, *, merge: bool = False, model: torch.nn.Module | None = None
) -> list[Transition]:
    options = TransitionOptions(
        credit=credit, merge=merge, gamma=GAMMA if credit == "discounted" else None
    )
    out: list[Transition] = []
    for rollout in ("a", "b"):
        calls, spans = _records(rollout, credit, model)
        trajectory = build_trajectory(
            rollout_id=rollout, task_id="task", calls=calls, spans=spans, options=options
        )
        out += trajectory.transitions
    return out


def _config(advantage: str, **fields: object) -> GRPOConfig:
    return GRPOConfig.model_validate(
        {"advantage": advantage, "normalize_std": False, "skip_zero_advantage": False, **fields}
    )


@pytest.mark.parametrize(("credit", "advantage"), sorted(EXPECTED))
def test_each_call_gets_the_advantage_of_the_table(credit: str, advantage: str) -> None:
    transitions = _transitions(credit)
    assert len(transitions) == 6
    samples, _ = build_samples(transitions, config=_config(advantage))
    got = {
        (t.rollout_id, t.call_index): s.advantages
        for t, s in zip(transitions, samples, strict=True)
    }
    for rollout, per_call in EXPECTED[(credit, advantage)].items():
        for k, want in enumerate(per_call):
            tokens = got[(rollout, k)]
            assert tokens == pytest.approx([want] * len(tokens), abs=1e-6), (rollout, k)


@pytest.mark.parametrize("advantage", ["rollout", "transition"])
def test_a_merged_chain_gets_each_calls_discount_once(advantage: str) -> None:
    """One transition per rollout (reward R, last call): earlier calls' tokens get gamma^k."""
    transitions = _transitions("discounted", merge=True)
    assert len(transitions) == 2
    samples, _ = build_samples(transitions, config=_config(advantage))
    for t, sample in zip(transitions, samples, strict=True):
        sign = 1.0 if t.rollout_id == "a" else -1.0
        calls = [0.125] * 2 + [0.25] * 3 + [0.5] * 4  # completion tokens of calls 0, 1, 2
        assert sample.advantages == pytest.approx([sign * c for c in calls], abs=1e-6)


def test_transition_advantages_reach_the_engine_gradient_once() -> None:
    """The engine's gradient on discounted x transition equals the table's, computed by hand.

    On-policy (ratio 1) the clipped loss's gradient is ``-sum(norm * A * grad logprob)``; with
    token normalization ``norm`` is 1 / trained tokens.
    """
    engine = GRPOUpdater(
        tiny_llama(seed=3), config=_config("transition", finetune="full", learning_rate=1e-3)
    )
    transitions = _transitions("discounted", model=engine.model)
    metrics = engine.compute_gradients(transitions)
    assert metrics["trained_tokens"] == 18
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    got = gradient(engine.model).clone()
    engine.optimizer.zero_grad(set_to_none=True)

    expected = EXPECTED[("discounted", "transition")]
    loss = torch.zeros(())
    for t in transitions:
        ids = torch.tensor([t.prompt_token_ids + t.completion_token_ids])
        start = len(t.prompt_token_ids)
        positions = torch.tensor([start + j for j, m in enumerate(t.loss_mask) if m])
        lp, _ = token_logprobs(
            engine.model,
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            rows=torch.zeros_like(positions),
            positions=positions,
        )
        loss = loss - expected[t.rollout_id][t.call_index] * lp.sum() / 18
    loss.backward()
    want = gradient(engine.model)
    assert float(want.abs().sum()) > 0
    torch.testing.assert_close(got, want, atol=1e-7, rtol=1e-4)
