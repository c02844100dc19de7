"""The engine-trainer logprob gap: measured every step, corrected on request (``grpo.mismatch``).

The pure functions are checked on values; the updater on the tiny model, where the recorded
logprobs are the policy's own shifted by a known gap per token: the ``mismatch/*`` metrics
report that gap, ``tis`` scales a token's gradient by the truncated ratio, the masks remove a
token's (a sequence's) gradient exactly.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.algorithms.losses import MismatchGap, correct_engine_mismatch
from fulmen.errors import ConfigError
from fulmen.trainer.config import load_config
from fulmen.trainer.trainer import Trainer
from fulmen.types import Transition

from .builders import gradient, transition
from .models import tiny_llama

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy"


def _correct(correction: str, **kwargs: object) -> tuple[list[float], list[float]]:
    current = torch.tensor([-1.0, -1.0, -1.0, -1.0, -1.0])
    engine = current - torch.log(torch.tensor([1.0, 1.5, 3.0, 0.4, 1.0]))  # ratios
    fix = correct_engine_mismatch(
        current_logprobs=current,
        engine_logprobs=engine,
        rows=torch.tensor([0, 0, 0, 1, 1]),
        correction=correction,
        cap=2.0,
        bounds=(0.5, 2.0),
        **kwargs,  # type: ignore[arg-type]
    )
    return fix.weights.tolist(), fix.old_logprobs.tolist()


def test_each_correction_weights_tokens_as_documented() -> None:
    weights, anchor = _correct("none")
    assert weights == [1.0] * 5 and anchor[2] == pytest.approx(-1.0 - math.log(3.0))
    weights, anchor = _correct("tis")
    assert weights == pytest.approx([1.0, 1.5, 2.0, 0.4, 1.0])  # min(ratio, cap)
    assert anchor == [-1.0] * 5  # the ratio is taken against the trainer's logprobs
    weights, _ = _correct("mask_tokens")
    assert weights == [1.0, 1.0, 0.0, 0.0, 1.0]  # 3.0 and 0.4 are outside [0.5, 2]
    weights, _ = _correct("mask_sequences")
    # row 0: geometric mean (1 * 1.5 * 3) ** (1/3) = 1.65 inside; row 1: sqrt(0.4) = 0.63 inside
    assert weights == [1.0] * 5
    current = torch.zeros(4)
    fix = correct_engine_mismatch(
        current_logprobs=current,
        engine_logprobs=torch.log(torch.tensor([1.0, 1.0, 0.1, 0.1])).neg(),  # ratios 1, 1, .1, .1
        rows=torch.tensor([0, 0, 1, 1]),
        correction="mask_sequences",
        cap=2.0,
        bounds=(0.5, 2.0),
    )
    assert fix.weights.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_exempt_tokens_keep_the_engine_anchor_and_weight_one() -> None:
    weights, anchor = _correct("tis", exempt=torch.tensor([False, False, True, False, False]))
    assert weights == pytest.approx([1.0, 1.5, 1.0, 0.4, 1.0])
    assert anchor[2] == pytest.approx(-1.0 - math.log(3.0)) and anchor[1] == -1.0


def test_the_correction_checks_its_arguments() -> None:
    with pytest.raises(ConfigError, match="unknown mismatch correction"):
        _correct("clip")
    with pytest.raises(ConfigError, match="one shape"):
        correct_engine_mismatch(
            current_logprobs=torch.zeros(2),
            engine_logprobs=torch.zeros(3),
            rows=torch.zeros(2, dtype=torch.long),
            correction="tis",
            cap=2.0,
            bounds=(0.5, 2.0),
        )


def test_the_gap_metrics_on_known_values() -> None:
    gap = MismatchGap()
    delta = torch.tensor([0.0, 0.1, -0.2, 1.0])
    gap.add_gap(
        current_logprobs=delta - 2.0,
        engine_logprobs=torch.full((4,), -2.0),
        weights=torch.tensor([1.0, 1.0, 0.0, 1.0]),
        bounds=(0.5, 2.0),
    )
    metrics = gap.gap_metrics()
    assert metrics["mismatch/gap_mean"] == pytest.approx(1.3 / 4)
    assert metrics["mismatch/gap_max"] == pytest.approx(1.0)
    k3 = sum(math.exp(d) - d - 1 for d in (0.0, 0.1, -0.2, 1.0)) / 4
    assert metrics["mismatch/kl"] == pytest.approx(k3, rel=1e-5)
    assert metrics["mismatch/outside_fraction"] == 0.25  # e^1 = 2.72 > 2
    assert metrics["mismatch/weight_mean"] == 0.75 and metrics["mismatch/masked_fraction"] == 0.25
    assert MismatchGap().gap_metrics() == {}


def _batch(model: torch.nn.Module, gaps: list[float]) -> list[Transition]:
    """One group of three; rollout ``i``'s recorded logprobs sit ``gaps[i]`` below the model's."""
    gen = torch.Generator().manual_seed(7)
    out: list[Transition] = []
    for i, (reward, gap) in enumerate(zip((1.0, 0.0, 0.25), gaps, strict=True)):
        prompt = [1, *torch.randint(3, 64, (3,), generator=gen).tolist()]
        completion = torch.randint(3, 64, (4,), generator=gen).tolist()
        t = transition(model, f"r{i}", prompt, completion, reward, task="t")
        out.append(t.model_copy(update={"logprobs": [lp - gap for lp in t.logprobs]}))
    return out


def _gradient(gaps: list[float], **mismatch: object) -> tuple[torch.Tensor, dict[str, float]]:
    """One pass's loss gradient and metrics with ``grpo.mismatch`` set to ``mismatch``."""
    config = GRPOConfig.model_validate({"clip_high": 0.2, "mismatch": mismatch})
    engine = GRPOUpdater(tiny_llama(), config=config)
    with torch.no_grad():  # a LoRA adapter starts at zero (B = 0): let gradients reach A too
        for name, p in engine.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    metrics = engine.compute_gradients(_batch(engine.model, gaps))
    return gradient(engine.model).clone(), metrics


def test_the_step_reports_the_gap_it_was_given() -> None:
    _, metrics = _gradient([0.0, 0.0, 0.0])
    assert metrics["mismatch/gap_mean"] < 1e-5 and metrics["mismatch/kl"] < 1e-9
    assert metrics["mismatch/outside_fraction"] == 0.0 and metrics["mismatch/weight_mean"] == 1.0
    _, metrics = _gradient([0.05, 0.0, 1.0])  # rollout 2 (advantage != 0) is 1.0 nats off
    assert metrics["mismatch/gap_max"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["mismatch/outside_fraction"] > 0  # e^1 > 2 on its tokens
    assert metrics["mismatch/masked_fraction"] == 0.0  # reported, not corrected


def test_tis_scales_a_tokens_gradient_by_its_truncated_ratio() -> None:
    plain, _ = _gradient([0.0, 0.0, 0.0])
    assert torch.allclose(_gradient([0.0, 0.0, 0.0], correction="tis")[0], plain, atol=1e-7)
    # rollout 0 carries weight exp(gap): its share of the gradient scales, the others' not
    base = _gradient([0.0, 0.0, 0.0], correction="tis")[0]
    one_and_half = _gradient([math.log(1.5), 0.0, 0.0], correction="tis")[0]
    share = one_and_half - base  # 0.5 x rollout 0's part
    assert float(share.abs().sum()) > 0
    one_and_3q = _gradient([math.log(1.75), 0.0, 0.0], correction="tis")[0]
    assert torch.allclose(one_and_3q - base, 1.5 * share, atol=1e-6)
    capped = _gradient([math.log(5.0), 0.0, 0.0], correction="tis", cap=2.0)[0]
    assert torch.allclose(capped, _gradient([math.log(2.0), 0.0, 0.0], correction="tis")[0])


def test_a_mask_removes_exactly_the_tokens_out_of_bounds() -> None:
    # rollout 0 far off (ratio e^2, e^3): masked, so how far off no longer matters
    masked, metrics = _gradient([2.0, 0.0, 0.0], correction="mask_tokens")
    assert metrics["mismatch/masked_fraction"] == pytest.approx(1 / 3)  # 4 of 12 trained tokens
    assert torch.allclose(masked, _gradient([3.0, 0.0, 0.0], correction="mask_tokens")[0])
    assert torch.allclose(masked, _gradient([2.0, 0.0, 0.0], correction="mask_sequences")[0])
    # and its gradient is gone: not the step with rollout 0 in it
    kept, metrics = _gradient([0.0, 0.0, 0.0], correction="mask_tokens")
    assert metrics["mismatch/masked_fraction"] == 0.0
    assert float((masked - kept).abs().sum()) > 1e-3 * float(kept.abs().sum())
    # a rollout whose ratio stays within the bounds is kept whole
    _, metrics = _gradient([0.1, 0.0, 0.0], correction="mask_sequences")
    assert metrics["mismatch/masked_fraction"] == 0.0


def test_settings_are_validated() -> None:
    config = GRPOAlgorithmConfig.model_validate(
        {"grpo": {"mismatch": {"correction": "tis", "cap": 3.0}}}
    )
    assert config.update_config(seed=0).mismatch.cap == 3.0
    for bad, match in (
        ({"grpo": {"mismatch": {"correction": "clip"}}}, "correction"),
        ({"grpo": {"mismatch": {"correction": "none", "cap": 3.0}}}, "cap applies"),
        ({"grpo": {"mismatch": {"bounds": [1.5, 2.0]}}}, "bounds"),
        ({"grpo": {"mismatch": {"bounds": [0.5, float("inf")]}}}, "bounds"),
        ({"grpo": {"mismatch": {"correction": "tis", "cap": float("nan")}}}, "cap"),
        ({"grpo": {"mismatch": {"correction": "tis"}, "epochs": 2}}, "epochs 1"),
        ({"grpo": {"mismatch": {"typo": 1}}}, "typo"),
    ):
        with pytest.raises(ValidationError, match=match):
            GRPOAlgorithmConfig.model_validate(bad)


@pytest.mark.parametrize(
    ("settings", "engine_dtype", "chosen"),
    [
        ({}, "float32", "none"),  # the built-in engine's and vLLM's default: a gap of ~1e-6
        ({}, "bfloat16", "tis"),
        ({"dtype": "bfloat16"}, "float32", "tis"),  # the update itself computes in bfloat16
        ({"autocast": "bfloat16"}, "float32", "tis"),
        ({"epochs": 2}, "bfloat16", "none"),  # a correction needs the one pass
        ({"mismatch": {"correction": "none"}}, "bfloat16", "none"),  # what was asked for
        ({"mismatch": {"correction": "mask_tokens"}}, "float32", "mask_tokens"),
    ],
)
def test_auto_chooses_the_correction_for_the_engines_precision(
    settings: dict[str, object], engine_dtype: str, chosen: str
) -> None:
    config = GRPOAlgorithmConfig.model_validate({"grpo": settings}).update_config(seed=0)
    assert config.mismatch.correction in ("auto", settings.get("mismatch", {}).get("correction"))  # type: ignore[union-attr]
    resolved = config.for_engine(engine_dtype)
    assert resolved.mismatch.correction == resolved.mismatch.applied == chosen
    assert config.mismatch.applied in ("none", chosen)  # unresolved "auto" applies nothing


@pytest.mark.slow
def test_a_bfloat16_engine_shows_a_gap_that_tis_weighs(tmp_path: Path) -> None:
    """A whole toy run: the built-in engine in bfloat16 against the float32 trainer.

    ``mismatch.correction`` is left at ``auto``: the run's bfloat16 engine makes it ``tis``.
    """
    pytest.importorskip("openai")
    config = load_config(
        TOY / "config.yaml",
        overrides=[
            f"run_dir={tmp_path / 'run'}",
            "algorithm.steps=2",
            "validation=null",
            "engine.dtype=bfloat16",
            "algorithm.grpo.mismatch={cap: 1.01}",  # correction: auto
        ],
    )
    history = Trainer(config).fit()
    trained = [h for h in history if h.get("updated")]
    assert trained, history
    for h in trained:
        assert h["mismatch/gap_mean"] > 1e-3  # bfloat16 sampling: far above float32's 1e-6
        assert h["mismatch/gap_max"] >= h["mismatch/gap_mean"] and h["mismatch/kl"] > 0
        # the weight is min(ratio, 1.01): below 1 where the engine favoured its token
        assert 0 < h["mismatch/weight_mean"] < 1.01 and h["mismatch/weight_mean"] != 1.0
        # the clipped ratio is taken against the trainer's own logprobs: 1 in the one pass
        assert h["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and h["clip_fraction"] == 0.0
