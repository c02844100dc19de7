"""fulmen's GRPO arithmetic against an independent reference: TRL's ``GRPOTrainer`` (issue 27).

TRL keeps its advantages and loss inside trainer methods, so the reference side runs
``GRPOTrainer._generate_and_score_completions`` (rewards -> group advantages) and
``GRPOTrainer._compute_loss`` (per-token loss -> aggregate), TRL's own code unmodified, on a stub
that carries the attributes they read: its "generation" returns the batch's token ids and
masks, its "reward function" the batch's rewards, and its "model" the batch's per-token
logprobs. fulmen's side goes through ``build_samples`` -> ``collate`` -> the loss tables, as
``GRPOUpdater`` does. Both differentiate one float64 leaf tensor of per-token logprobs.

What corresponds (TRL -> fulmen):

- ``loss_type="dapo"`` and ``"bnpo"`` (one process, one micro-batch) -> ``loss_normalization:
  token``: every trained token of the batch weighs ``1 / N``;
- ``loss_type="grpo"`` (mean over a sequence's tokens, then over sequences) -> ``rollout``
  when every rollout is one call (one sequence);
- ``loss_type="dr_grpo"`` (token sum over ``B * max_completion_length``) has no fulmen
  normalizer; fulmen's ``token`` loss times ``N / (B * max_completion_length)`` is compared;
- ``scale_rewards="group"`` / ``"none"`` -> ``normalize_std`` on / off: both use the group mean
  and the Bessel-corrected group std, with the eps added to the std (not under the root);
- ``epsilon`` / ``epsilon_high`` (clipping both sides, ``delta=None``) -> ``clip_low`` /
  ``clip_high``;
- ``beta`` with ``use_bias_correction_kl=False`` (plain k3 per token) -> ``kl_coef``, ``k3``.

Where fulmen deliberately differs, the test says so and checks fulmen's formula instead:

- eps: TRL adds 1e-4 to the std (hard-coded), fulmen 1e-6. ``(x - m) / (s + e)`` with ``x``
  scaled by ``k`` is ``(x - m) / (s + e / k)``, so TRL run on rewards x 100 computes exactly
  fulmen's eps; the advantage test also runs fulmen's formula with TRL's eps on the rewards;
- multi-call rollouts: fulmen computes one advantage per rollout and broadcasts it to all the
  rollout's calls, and ``rollout`` normalization gives each rollout (not each call) ``1 / R``.
  TRL has no rollout of several sequences; fulmen's formula is checked directly, and equals
  TRL's on one sequence per rollout holding all its calls' completions;
- TRL's default ``use_bias_correction_kl=True`` multiplies k3 by the (differentiable) ratio;
  fulmen's k3 is not ratio-weighted. The test pins that TRL's default is fulmen's per-token
  pieces with the KL times the ratio, and that its gradient differs from fulmen's;
- not compared (no counterpart): ``scale_rewards="batch"``, ``delta`` (INTELLECT-2 upper
  clip), sequence-level importance sampling, the other TRL loss types; fulmen's credit
  weights (all 1 here), ragged groups, ``min_abs_advantage`` (fulmen trains an advantage of
  magnitude <= 1e-6 as 0; every nonzero advantage here is far larger), the ``transition``
  estimator.

Tolerances. Identical float64 inputs to the per-token formulas: ``EXACT_TOL = 1e-12`` absolute
(values are O(1); float64 rounding is ~1e-16, so any formula difference shows). Advantages:
``1e-12`` relative where ``group_advantages`` returns float64, one float32 ulp (``2**-23``)
where it returns float32; TRL's side runs with float64 as torch's default dtype, since its
``nanstd`` takes Bessel's factor in the default dtype. End to end, the loss sees fulmen's
advantages and norm weights in float32 (``collate``, the normalizers), so losses and gradients
are compared with ``STEP_RTOL = 1e-6`` relative to the largest magnitude (~8 float32 ulps); the
behaviour logprobs and rewards are drawn exactly representable in float32, so that rounding is
the only difference. ``python tests/algorithms/test_reference_trl.py`` prints every measured
max absolute difference next to its tolerance.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch
from torch import Tensor

from fulmen.algorithms.batching import MicroBatch, collate
from fulmen.algorithms.grpo.advantages import group_advantages
from fulmen.algorithms.grpo.config import GRPOConfig
from fulmen.algorithms.grpo.samples import build_samples
from fulmen.algorithms.losses import (
    KL_ESTIMATORS,
    POLICY_LOSSES,
    PolicyLossTerms,
    clipped_policy_loss,
    k3_kl,
)
from fulmen.types.transitions import Transition

grpo_trainer = pytest.importorskip(
    "trl.trainer.grpo_trainer",
    reason="TRL (the reference implementation) is not installed; it is in the dev extra",
)
GRPOTrainer = grpo_trainer.GRPOTrainer

CLIP_LOW, CLIP_HIGH = 0.2, 0.28
KL_COEF = 0.04
GROUPS, GROUP_SIZE = 3, 4
ROWS = GROUPS * GROUP_SIZE
MAX_COMPLETION_LENGTH = 24  # TRL's config constant (Dr. GRPO divides by it)
STRIDE = 1000  # completion token id = 1 + row * STRIDE + column: a token names its TRL cell
TRL_EPS = 1e-4  # TRL adds this to the group std
EPS_MATCHING_SCALE = 100.0  # TRL on rewards x 100 uses fulmen's eps, 1e-6, on the rewards
EXACT_TOL = 1e-12
FLOAT32_RTOL = 2.0**-23  # one float32 ulp, relative
# fulmen's advantages against TRL's, relative: one float32 ulp where group_advantages returns
# float32, 1e-12 where it returns float64 (the two compute mean and std in different orders)
ADVANTAGE_RTOL = {torch.float32: FLOAT32_RTOL, torch.float64: 1e-12}
STEP_RTOL = 1e-6

# TRL loss type -> the fulmen loss normalization it corresponds to
NORMALIZATION = {"dapo": "token", "bnpo": "token", "grpo": "rollout", "dr_grpo": "token"}


# ---------------------------------------------------------------------------------------------
# The batch: rollouts (TRL rows) of one or more calls, groups contiguous


@dataclass(frozen=True)
class Batch:
    """One random step batch, as fulmen transitions and as TRL's padded ``[B, T]`` tensors.

    Row ``b`` is rollout ``b``; its columns are its calls' completion tokens, concatenated.
    """

    transitions: list[Transition]
    rewards: Tensor  # [B] float64, exact in float32
    groups: Tensor  # [B]
    completion_ids: list[list[int]]
    trained: Tensor  # [B, T] 1 where fulmen trains the token (TRL's tool_mask), else 0
    old: Tensor  # [B, T] behaviour logprobs, exact in float32, 0 where not trained
    current: Tensor  # [B, T] the policy's logprobs
    ref: Tensor  # [B, T] the reference's logprobs

    @property
    def num_tokens(self) -> int:
        return int(self.trained.sum())


def make_batch(seed: int = 0, *, max_calls: int = 1) -> Batch:
    gen = torch.Generator().manual_seed(seed)

    def randint(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (), generator=gen))

    rewards = torch.randint(0, 9, (ROWS,), generator=gen).double() / 8
    for g in range(GROUPS - 1):  # a spread in every group...
        rewards[g * GROUP_SIZE : g * GROUP_SIZE + 2] = torch.tensor([0.0, 1.0])
    rewards[-GROUP_SIZE:] = 0.5  # ...but the last: zero variance, advantage 0 on both sides
    calls = [
        [
            (randint(1, 3), [1] + [int(torch.rand((), generator=gen) < 0.8) for _ in range(n)])
            for n in [randint(1, 5) for _ in range(randint(1, max_calls))]
        ]
        for _ in range(ROWS)
    ]
    masks = [[m for _, mask in row_calls for m in mask] for row_calls in calls]
    width = max(len(mask) for mask in masks)
    assert width <= MAX_COMPLETION_LENGTH
    trained = torch.zeros(ROWS, width, dtype=torch.float64)
    for row, mask in enumerate(masks):
        trained[row, : len(mask)] = torch.tensor(mask, dtype=torch.float64)
    base = -(torch.rand(ROWS, width, generator=gen) * 2.5 + 0.05).double()  # float32 draws
    old = base * trained
    noise = torch.randn(2, ROWS, width, generator=gen, dtype=torch.float64)
    current = base + 0.35 * noise[0]  # ratios e^N(0, 0.35): clipped on both sides
    ref = base + 0.25 * noise[1]
    transitions: list[Transition] = []
    completion_ids: list[list[int]] = []
    for row, row_calls in enumerate(calls):
        ids: list[int] = []
        for index, (prompt_len, mask) in enumerate(row_calls):
            columns = range(len(ids), len(ids) + len(mask))
            ids += [1 + row * STRIDE + c for c in columns]
            transitions.append(
                Transition(
                    rollout_id=f"r{row}",
                    task_id=f"task{row // GROUP_SIZE}",
                    call_index=index,
                    prompt_token_ids=[0] * prompt_len,
                    completion_token_ids=ids[-len(mask) :],
                    logprobs=[float(old[row, c]) for c in columns],
                    loss_mask=mask,
                    credit_weights=[1.0] * len(mask),
                    reward=float(rewards[row]),
                    rollout_reward=float(rewards[row]),
                )
            )
        completion_ids.append(ids)
    groups = torch.arange(ROWS) // GROUP_SIZE
    return Batch(transitions, rewards, groups, completion_ids, trained, old, current, ref)


# ---------------------------------------------------------------------------------------------
# fulmen's side: build_samples -> collate -> the loss tables, as GRPOUpdater._accumulate


@dataclass(frozen=True)
class FulmenStep:
    loss: Tensor
    micro: MicroBatch
    terms: PolicyLossTerms


def fulmen_step(
    batch: Batch, current: Tensor, *, normalization: str, normalize_std: bool, kl_coef: float
) -> FulmenStep:
    config = GRPOConfig(
        loss_normalization=normalization,  # type: ignore[arg-type]
        normalize_std=normalize_std,
        kl_coef=kl_coef,
        clip_low=CLIP_LOW,
        clip_high=CLIP_HIGH,
    )
    samples, _ = build_samples(batch.transitions, config=config)
    micro = collate(samples)
    code = micro.input_ids[micro.rows, micro.positions] - 1
    row, column = code // STRIDE, code % STRIDE
    assert torch.equal(micro.old_logprobs.double(), batch.old[row, column])
    logprobs = current[row, column]
    terms = POLICY_LOSSES[config.policy_loss](
        logprobs=logprobs,
        old_logprobs=micro.old_logprobs.double(),
        advantages=micro.advantages.double(),
        clip_low=config.clip_low,
        clip_high=config.clip_high,
    )
    per_token = terms.loss
    if config.kl_coef > 0:
        kl = KL_ESTIMATORS[config.kl_estimator](
            logprobs=logprobs, ref_logprobs=batch.ref[row, column]
        )
        per_token = per_token + config.kl_coef * kl
    return FulmenStep((micro.norm.double() * per_token).sum(), micro, terms)


# ---------------------------------------------------------------------------------------------
# TRL's side: its own methods on a stub trainer


class _Model:
    training = True
    is_gradient_checkpointing = False


class _Accelerator:
    """One process: gathering and reducing return the local value."""

    device = torch.device("cpu")
    process_index = 0
    num_processes = 1
    sync_gradients = True

    @staticmethod
    def gather(tensor: Tensor) -> Tensor:
        return tensor

    @staticmethod
    def reduce(tensor: Tensor, reduction: str = "sum") -> Tensor:
        return tensor

    gather_for_metrics = gather


class TrlStub:
    """The attributes ``GRPOTrainer``'s advantage and loss methods read; those methods are TRL's."""

    _generate_and_score_completions = GRPOTrainer._generate_and_score_completions
    _compute_loss = GRPOTrainer._compute_loss

    def __init__(
        self,
        batch: Batch,
        current: Tensor,
        *,
        loss_type: str,
        beta: float,
        scale_rewards: str,
        reward_scale: float = 1.0,
        use_bias_correction_kl: bool = False,
    ) -> None:
        self._batch, self._current, self._reward_scale = batch, current, reward_scale
        self.model, self.ref_model, self.policy = _Model(), _Model(), _Model()
        self.accelerator = _Accelerator()
        self.args = SimpleNamespace(
            per_device_train_batch_size=ROWS,
            per_device_eval_batch_size=ROWS,
            steps_per_generation=1,
            gradient_accumulation_steps=1,
            gradient_checkpointing_kwargs=None,
            use_bias_correction_kl=use_bias_correction_kl,
            delta=None,
        )
        # Two iterations per generation: TRL asks the model for old_per_token_logps (here the
        # behaviour logprobs) instead of assuming ratio 1, so clipping happens.
        self.num_iterations = 2
        self.num_generations = GROUP_SIZE
        self.max_completion_length = MAX_COMPLETION_LENGTH
        self.loss_type, self.beta, self.scale_rewards = loss_type, beta, scale_rewards
        self.epsilon_low, self.epsilon_high = CLIP_LOW, CLIP_HIGH
        self.importance_sampling_level = "token"
        self.top_entropy_quantile = 1.0
        self.off_policy_mask_threshold = None
        self.aux_loss_enabled = False
        self._entropy_bonus_enabled = False
        self.use_vllm = False
        self.current_gradient_accumulation_steps = 1
        self.multi_objective_aggregation = "sum_then_normalize"
        self.reward_weights = torch.ones(1, dtype=torch.float64)
        self.reward_func_names = ["reward"]
        self.environment_factories = self.environments = self.tools = None
        self.pad_to_multiple_of = None
        self.mask_truncated_completions = False
        self.log_multimodal = False
        self._tokenizer = SimpleNamespace(pad_token_id=0)
        self._metrics: defaultdict[str, defaultdict[str, list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self._logs: dict[str, Any] = {
            "prompt": [],
            "completion": [],
            "advantages": [],
            "rewards": defaultdict(list),
            "extra": defaultdict(list),
        }
        self._pending_extra_logs: dict[str, list[object]] = {}
        self._pending_metrics: dict[str, list[float]] = {}

    def _generate(self, prompts: list[str]) -> tuple[Any, ...]:
        ids = [list(row) for row in self._batch.completion_ids]
        tool_mask = [
            self._batch.trained[b, : len(row)].long().tolist() for b, row in enumerate(ids)
        ]
        return [[0] for _ in prompts], ids, tool_mask, [""] * len(prompts), None, {}, None, None

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, ids: Any) -> Tensor:
        return (self._batch.rewards * self._reward_scale).unsqueeze(1)

    def _get_per_token_logps_and_entropies(
        self,
        model: _Model,
        input_ids: Tensor,
        attention_mask: Tensor,
        logits_to_keep: int,
        **_: Any,
    ) -> tuple[Tensor, Tensor, None]:
        if model is self.model:
            logps = self._batch.old
        elif model is self.ref_model:
            logps = self._batch.ref
        else:
            assert model is self.policy
            logps = self._current
        assert logps.shape == (input_ids.shape[0], logits_to_keep)
        return logps, torch.zeros_like(logps.detach()), None

    def inputs(self) -> dict[str, Any]:
        """TRL's training inputs: padded ids and masks, advantages, old and ref logprobs."""
        # TRL gathers its logged prompts with accelerate's gather_object; one process has
        # nothing to gather, and this keeps accelerate's process state out of the test.
        # TRL's nanstd takes Bessel's factor count / (count - 1) in torch's default dtype
        # (float32: 4/3 is off by 3e-8 relative); float64 lets its formula show to 1e-16.
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            with mock.patch.object(grpo_trainer, "gather_object", lambda obj: obj):
                return self._generate_and_score_completions([{"prompt": ""} for _ in range(ROWS)])
        finally:
            torch.set_default_dtype(previous)

    def loss(self, inputs: dict[str, Any]) -> Tensor:
        return self._compute_loss(self.policy, inputs)


# ---------------------------------------------------------------------------------------------
# Comparisons (each measured, then checked by a test; ``report`` prints them)


@dataclass(frozen=True)
class Comparison:
    name: str
    loss_diff: float  # max |fulmen - TRL| of the loss (of the advantages where ``quantity`` says)
    loss_tol: float
    grad_diff: float | None = None  # max |fulmen - TRL| of the gradient w.r.t. the logprobs
    grad_tol: float | None = None
    quantity: str = "loss"

    def check(self) -> None:
        assert self.loss_diff <= self.loss_tol, self
        if self.grad_diff is not None:
            assert self.grad_tol is not None
            assert self.grad_diff <= self.grad_tol, self


def _grad(loss: Tensor, leaf: Tensor, *, retain_graph: bool = False) -> Tensor:
    (grad,) = torch.autograd.grad(loss, leaf, retain_graph=retain_graph)
    return grad


def compare_per_token(*, beta: float, seed: int = 0) -> Comparison:
    """Per-token loss (policy + beta * k3) and its gradient on identical float64 inputs."""
    batch = make_batch(seed)
    current = batch.current.clone().requires_grad_()
    trainer = TrlStub(batch, current, loss_type="dapo", beta=beta, scale_rewards="group")
    inputs = trainer.inputs()
    one = torch.ones((), dtype=torch.float64)

    def trl(mask: Tensor) -> Tensor:
        # "dapo" is sum(per_token_loss * mask) / num_items_in_batch: with num_items_in_batch 1,
        # a one-token mask gives that token's loss and the trained mask the sum
        return trainer.loss({**inputs, "tool_mask": mask, "num_items_in_batch": one})

    cells = batch.trained.nonzero()
    with torch.no_grad():
        trl_values = []
        for r, c in cells.tolist():
            one_hot = torch.zeros_like(inputs["completion_mask"])
            one_hot[r, c] = 1
            trl_values.append(trl(one_hot))
    trl_grad = _grad(trl(batch.trained.long()), current)
    row, column = cells.unbind(1)
    logprobs = current[row, column]
    terms = clipped_policy_loss(
        logprobs=logprobs,
        old_logprobs=batch.old[row, column],
        advantages=inputs["advantages"][row],
        clip_low=CLIP_LOW,
        clip_high=CLIP_HIGH,
    )
    assert terms.is_clipped_low.any() and terms.is_clipped_high.any()
    values = terms.loss + beta * k3_kl(logprobs=logprobs, ref_logprobs=batch.ref[row, column])
    grad = _grad(values.sum(), current)
    return Comparison(
        f"per-token clipped loss + {beta} * k3 (float64)",
        float((values.detach() - torch.stack(trl_values)).abs().max()),
        EXACT_TOL,
        float((grad - trl_grad).abs().max()),
        EXACT_TOL,
    )


ADVANTAGE_CASES = {
    # name: (scale_rewards, reward_scale, fulmen's eps)
    "group std, TRL's eps 1e-4 in fulmen's formula": ("group", 1.0, TRL_EPS),
    "group std, fulmen's eps 1e-6 (TRL on rewards x 100)": ("group", EPS_MATCHING_SCALE, 1e-6),
    "no std (scale_rewards none / normalize_std off)": ("none", 1.0, 1e-6),
}


def compare_advantages(name: str, *, seed: int = 0) -> Comparison:
    scale_rewards, reward_scale, eps = ADVANTAGE_CASES[name]
    batch = make_batch(seed)
    trainer = TrlStub(
        batch,
        batch.current,
        loss_type="dapo",
        beta=0.0,
        scale_rewards=scale_rewards,
        reward_scale=reward_scale,
    )
    trl = trainer.inputs()["advantages"]
    ours = group_advantages(
        scores=batch.rewards, groups=batch.groups, normalize_std=scale_rewards == "group", eps=eps
    )
    rtol = ADVANTAGE_RTOL[ours.dtype]
    assert trl.dtype == torch.float64
    assert (ours[-GROUP_SIZE:] == 0).all() and (trl[-GROUP_SIZE:] == 0).all()
    diff = (ours.double() - trl).abs()
    assert bool((diff <= rtol * trl.abs()).all()), (ours, trl)  # relative to each advantage
    return Comparison(
        f"advantages, {name}",
        float(diff.max()),
        rtol * float(trl.abs().max()),
        quantity="adv.",
    )


STEP_CASES = [
    (loss_type, beta, normalize_std)
    for loss_type in NORMALIZATION
    for normalize_std in (True, False)
    for beta in (0.0, KL_COEF)
]
MULTI_CALL_CASES = [(loss_type, beta) for loss_type in ("grpo", "dapo") for beta in (0.0, KL_COEF)]


def compare_step(
    loss_type: str, *, beta: float, normalize_std: bool, max_calls: int = 1, seed: int = 0
) -> Comparison:
    """The step loss and its gradient end to end: transitions/rewards in, one scalar out."""
    batch = make_batch(seed, max_calls=max_calls)
    current = batch.current.clone().requires_grad_()
    ours = fulmen_step(
        batch,
        current,
        normalization=NORMALIZATION[loss_type],
        normalize_std=normalize_std,
        kl_coef=beta,
    )
    loss = ours.loss
    if loss_type == "dr_grpo":
        # fulmen cannot express Dr. GRPO's constant normalizer: its token loss divides by the
        # batch's N trained tokens, Dr. GRPO by B * max_completion_length
        loss = loss * (batch.num_tokens / (ROWS * MAX_COMPLETION_LENGTH))
    grad = _grad(loss, current)
    trainer = TrlStub(
        batch,
        current,
        loss_type=loss_type,
        beta=beta,
        scale_rewards="group" if normalize_std else "none",
        reward_scale=EPS_MATCHING_SCALE if normalize_std else 1.0,
    )
    trl_loss = trainer.loss(trainer.inputs())
    trl_grad = _grad(trl_loss, current)
    # the clip counts agree too (TRL logs them, in float32, as means over the trained tokens)
    metrics = trainer._metrics["train"]
    for side, clipped in (("low", ours.terms.is_clipped_low), ("high", ours.terms.is_clipped_high)):
        assert int(clipped.sum()) > 0
        assert metrics[f"clip_ratio/{side}_mean"][-1] == pytest.approx(
            int(clipped.sum()) / batch.num_tokens, rel=FLOAT32_RTOL
        )
    calls = f", up to {max_calls} calls per rollout" if max_calls > 1 else ""
    std = "std" if normalize_std else "no std"
    return Comparison(
        f"step {loss_type} <-> {NORMALIZATION[loss_type]}, {std}, beta {beta}{calls}",
        abs(float(loss.detach() - trl_loss.detach())),
        STEP_RTOL * max(1.0, abs(float(trl_loss.detach()))),
        float((grad - trl_grad).abs().max()),
        STEP_RTOL * float(trl_grad.abs().max()),
    )


def compare_bias_corrected_kl(*, seed: int = 0) -> Comparison:
    """TRL's default KL (k3 times the differentiable ratio) from fulmen's per-token pieces."""
    batch = make_batch(seed)
    current = batch.current.clone().requires_grad_()
    trainer = TrlStub(
        batch,
        current,
        loss_type="dapo",
        beta=KL_COEF,
        scale_rewards="group",
        use_bias_correction_kl=True,
    )
    inputs = trainer.inputs()
    trl_grad = _grad(trl_loss := trainer.loss(inputs), current)
    row, column = batch.trained.nonzero().unbind(1)
    logprobs, old = current[row, column], batch.old[row, column]
    policy = clipped_policy_loss(
        logprobs=logprobs,
        old_logprobs=old,
        advantages=inputs["advantages"][row],
        clip_low=CLIP_LOW,
        clip_high=CLIP_HIGH,
    ).loss
    kl = k3_kl(logprobs=logprobs, ref_logprobs=batch.ref[row, column])
    weighted = (policy + KL_COEF * kl * (logprobs - old).exp()).mean()
    plain_grad = _grad((policy + KL_COEF * kl).mean(), current, retain_graph=True)
    # fulmen's own (unweighted) k3 gives another gradient: the difference is real
    assert float((plain_grad - trl_grad).abs().max()) > 1e-4
    grad = _grad(weighted, current)
    return Comparison(
        "TRL default KL (use_bias_correction_kl) = fulmen k3 x ratio",
        abs(float(weighted.detach() - trl_loss.detach())),
        EXACT_TOL,
        float((grad - trl_grad).abs().max()),
        EXACT_TOL,
    )


def comparisons() -> Iterator[Comparison]:
    for beta in (0.0, KL_COEF):
        yield compare_per_token(beta=beta)
    for name in ADVANTAGE_CASES:
        yield compare_advantages(name)
    for loss_type, beta, normalize_std in STEP_CASES:
        yield compare_step(loss_type, beta=beta, normalize_std=normalize_std)
    for loss_type, beta in MULTI_CALL_CASES:
        yield compare_step(loss_type, beta=beta, normalize_std=True, max_calls=3)
    yield compare_bias_corrected_kl()


def report() -> None:
    import trl

    print(f"TRL {trl.__version__}, torch {torch.__version__}; max |fulmen - TRL| (tolerance)")
    for c in comparisons():
        grad = "" if c.grad_diff is None else f"   grad {c.grad_diff:9.2e} ({c.grad_tol:.1e})"
        print(f"{c.name:<66} {c.quantity:<4} {c.loss_diff:9.2e} ({c.loss_tol:.1e}){grad}")


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("beta", [0.0, KL_COEF])
def test_per_token_loss_and_gradient_match_trl(beta: float) -> None:
    compare_per_token(beta=beta).check()


@pytest.mark.parametrize("name", list(ADVANTAGE_CASES))
def test_group_advantages_match_trl(name: str) -> None:
    compare_advantages(name).check()


def test_fulmen_default_eps_is_not_trls() -> None:
    """The deliberate eps difference is visible on the unscaled rewards (and only there)."""
    batch = make_batch()
    trainer = TrlStub(batch, batch.current, loss_type="dapo", beta=0.0, scale_rewards="group")
    trl = trainer.inputs()["advantages"]
    ours = group_advantages(scores=batch.rewards, groups=batch.groups).double()
    assert float((ours - trl).abs().max()) > 1e-5


@pytest.mark.parametrize(("loss_type", "beta", "normalize_std"), STEP_CASES)
def test_step_loss_and_gradient_match_trl(loss_type: str, beta: float, normalize_std: bool) -> None:
    compare_step(loss_type, beta=beta, normalize_std=normalize_std).check()


@pytest.mark.parametrize(("loss_type", "beta"), MULTI_CALL_CASES)
def test_multi_call_rollouts_match_trl_on_one_sequence_per_rollout(
    loss_type: str, beta: float
) -> None:
    compare_step(loss_type, beta=beta, normalize_std=True, max_calls=3).check()


@pytest.mark.parametrize("normalization", ["token", "rollout"])
def test_multi_call_rollouts_follow_fulmens_formula(normalization: str) -> None:
    """Deliberate: one advantage per rollout broadcast to its calls; rollouts weigh 1/R."""
    batch = make_batch(max_calls=3)
    assert len(batch.transitions) > ROWS  # some rollouts have several calls
    config = GRPOConfig(loss_normalization=normalization, kl_coef=KL_COEF)  # type: ignore[arg-type]
    samples, _ = build_samples(batch.transitions, config=config)
    micro = collate(samples)
    rollout = micro.token_rollout
    per_rollout = group_advantages(scores=batch.rewards, groups=batch.groups)
    # the loss's tensors are float32 (collate): the rollout's advantage, rounded once
    assert torch.equal(micro.advantages, per_rollout[rollout].to(micro.advantages.dtype))
    tokens = batch.trained.sum(1)  # n_r: trained tokens of each rollout, all its calls
    expected = 1 / (tokens[rollout] * ROWS) if normalization == "rollout" else 1 / tokens.sum()
    torch.testing.assert_close(
        micro.norm.double(), expected.expand_as(rollout), rtol=FLOAT32_RTOL, atol=0
    )
    if normalization == "rollout":
        sums = torch.zeros(ROWS, dtype=torch.float64).index_add_(0, rollout, micro.norm.double())
        torch.testing.assert_close(sums, torch.full((ROWS,), 1 / ROWS, dtype=torch.float64))


def test_trl_default_kl_is_ratio_weighted_k3() -> None:
    compare_bias_corrected_kl().check()


if __name__ == "__main__":
    report()
