"""The paired statistics of ``fulmen ab`` against values computed by hand and by textbook tables."""

from __future__ import annotations

import math

import pytest

from fulmen.debugging.stats import (
    compare_paired,
    sign_test_p,
    student_t_cdf,
    student_t_quantile,
)
from fulmen.errors import ConfigError


@pytest.mark.parametrize(
    ("df", "quantile"),
    [(1, 12.7062), (2, 4.3027), (5, 2.5706), (15, 2.1314), (30, 2.0423), (1000, 1.9623)],
)
def test_t_quantiles_match_the_table(df: int, quantile: float) -> None:
    assert student_t_quantile(0.975, df) == pytest.approx(quantile, abs=1e-4)
    assert student_t_cdf(quantile, df) == pytest.approx(0.975, abs=1e-5)


def test_t_cdf_closed_forms() -> None:
    # df = 1 is the Cauchy distribution; df = 2 has F(t) = 1/2 + t / (2 sqrt(t^2 + 2)).
    for t in (-3.0, -0.5, 0.0, 0.7, 4.0):
        assert student_t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert student_t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(t * t + 2)))


def test_paired_comparison_by_hand() -> None:
    a = [0.1, 0.2, 0.3, 0.4, 0.5]
    b = [0.15, 0.3, 0.32, 0.55, 0.5]
    c = compare_paired(a, b)
    diffs = [0.05, 0.1, 0.02, 0.15, 0.0]
    mean = sum(diffs) / 5
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 4)
    t = mean / (sd / math.sqrt(5))
    assert c.mean_difference == pytest.approx(0.064)
    assert c.t_statistic == pytest.approx(t)
    assert c.t_p == pytest.approx(2 * (1 - student_t_cdf(t, 4)))
    assert c.t_p == pytest.approx(0.0791, abs=1e-4)  # scipy.stats.ttest_rel gives 0.07910
    half = 2.776445 * sd / math.sqrt(5)
    assert (c.ci_low, c.ci_high) == pytest.approx((mean - half, mean + half), abs=1e-6)
    assert (c.wins, c.losses, c.ties) == (4, 0, 1)
    assert c.sign_p == 0.125  # 2 * (1/2)^4
    # Four non-zero differences, all positive: only the all-positive and all-negative of the
    # 2^5 sign patterns reach |sum| (the zero flips freely): 4 / 32.
    assert c.permutation_exact and c.permutation_p == pytest.approx(4 / 32)


def test_identical_rewards_are_no_difference() -> None:
    c = compare_paired([0.5, 1.0, 0.0], [0.5, 1.0, 0.0])
    assert c.mean_difference == 0 and c.t_p is None and c.sign_p == 1.0
    assert c.permutation_p == 1.0


def test_large_samples_use_a_seeded_monte_carlo_permutation() -> None:
    a = [0.0] * 40
    b = [1.0 if i % 4 else 0.0 for i in range(40)]  # 30 wins, 10 ties
    c = compare_paired(a, b)
    assert not c.permutation_exact
    assert c.permutation_p == compare_paired(a, b).permutation_p  # same seed, same estimate
    assert c.permutation_p < 1e-3 and c.sign_p == pytest.approx(2 * 0.5**30)


def test_sign_test_and_bad_input() -> None:
    assert sign_test_p(9, 0) == pytest.approx(2 / 512)
    assert sign_test_p(5, 5) == 1.0
    with pytest.raises(ConfigError, match="differ in length: 2 and 3"):
        compare_paired([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ConfigError, match="at least one task"):
        compare_paired([], [])
