"""The sampler records logprobs of the distribution it sampled from (vLLM's processed mode)."""

from __future__ import annotations

import math

import pytest
import torch

from fulmen.engines.builtin.sampling import SamplingParams, sample

VOCAB = 50


def logits_row(seed: int = 0) -> torch.Tensor:
    return torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def draw(logits: torch.Tensor, params: SamplingParams, seed: int = 1, draws: int = 200):
    gen = torch.Generator().manual_seed(seed)
    return [sample(logits, [params], [gen])[0] for _ in range(draws)]


@pytest.mark.parametrize("temperature", [1.0, 0.8, 1.3])
def test_logprobs_are_those_of_the_tempered_distribution(temperature: float) -> None:
    logits = logits_row()
    expected = torch.log_softmax(logits[0] / temperature, dim=-1)
    tokens = draw(logits, SamplingParams(temperature=temperature, top_logprobs=3))
    for token in tokens:
        assert token.logprob == pytest.approx(float(expected[token.token_id]), abs=1e-5)
        top_ids = [i for i, _ in token.top]
        assert top_ids == torch.topk(expected, 3).indices.tolist()
        assert [v for _, v in token.top] == pytest.approx(torch.topk(expected, 3).values.tolist())


def test_tempered_logprobs_differ_from_raw_ones() -> None:
    """Guards the test above: at 0.8 the raw and the tempered logprobs are far apart."""
    logits = logits_row()
    raw = torch.log_softmax(logits[0], dim=-1)
    token = draw(logits, SamplingParams(temperature=0.8), draws=1)[0]
    assert abs(token.logprob - float(raw[token.token_id])) > 1e-2


def test_top_p_logprobs_are_renormalized_over_the_kept_set() -> None:
    logits = logits_row()
    tempered = torch.softmax(logits[0] / 0.8, dim=-1)
    order = torch.argsort(tempered, descending=True)
    mass = torch.cumsum(tempered[order], dim=0)
    keep = order[: int((mass < 0.7).sum()) + 1].tolist()  # smallest prefix with mass >= 0.7
    kept_mass = float(tempered[keep].sum())
    tokens = draw(logits, SamplingParams(temperature=0.8, top_p=0.7, top_logprobs=VOCAB))
    assert {t.token_id for t in tokens} <= set(keep)
    for token in tokens:
        want = math.log(float(tempered[token.token_id]) / kept_mass)
        assert token.logprob == pytest.approx(want, abs=1e-5)
        outside = [v for i, v in token.top if i not in keep]
        assert outside and all(v == -9999.0 for v in outside)  # -inf, as vLLM reports it


def test_top_k_logprobs_are_renormalized_over_the_k_best() -> None:
    logits = logits_row(3)
    keep = torch.topk(logits[0], 4).indices.tolist()
    expected = torch.log_softmax(logits[0, keep] / 0.9, dim=-1)
    tokens = draw(logits, SamplingParams(temperature=0.9, top_k=4))
    assert {t.token_id for t in tokens} == set(keep)
    for token in tokens:
        assert token.logprob == pytest.approx(float(expected[keep.index(token.token_id)]), abs=1e-5)


def test_greedy_takes_the_argmax_and_reports_raw_logprobs() -> None:
    logits = logits_row()
    token = sample(logits, [SamplingParams(temperature=0.0, top_k=2)], [None])[0]
    assert token.token_id == int(logits[0].argmax())
    assert token.logprob == pytest.approx(float(torch.log_softmax(logits[0], -1).max()))


def test_rows_of_one_batch_use_their_own_parameters() -> None:
    logits = torch.cat([logits_row(0), logits_row(0)])
    gens = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)]
    hot, cold = sample(
        logits, [SamplingParams(temperature=1.0), SamplingParams(temperature=0.5)], gens
    )
    assert hot.logprob == pytest.approx(float(torch.log_softmax(logits[0], -1)[hot.token_id]))
    half = torch.log_softmax(logits[0] / 0.5, -1)
    assert cold.logprob == pytest.approx(float(half[cold.token_id]))


def test_request_fields_that_reshape_the_distribution_are_applied_or_refused() -> None:
    from fulmen.engines.builtin.errors import APIError
    from fulmen.engines.builtin.protocol import CompletionRequest, sampling_params

    def params(**body: object) -> SamplingParams:
        req = CompletionRequest.model_validate({"model": "m", "prompt": "x", **body})
        return sampling_params(req, prompt_len=1, max_model_len=64)

    assert params(top_k=-1).top_k == 0  # vLLM's "every token"
    assert params(top_k=7, top_p=0.5).top_k == 7
    for field, value in (("min_p", 0.1), ("repetition_penalty", 1.2)):
        with pytest.raises(APIError, match=field):
            params(**{field: value})
