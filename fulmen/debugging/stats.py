"""Statistics for comparing two versions, standard library only.

``compare_paired(a, b)`` takes each task's reward under A and under B and returns the means,
the paired difference ``B - A`` with a 95% confidence interval (Student's t), the paired
t-test's two-sided p-value, an exact two-sided sign test (ties dropped) and a two-sided
permutation test that flips the sign of each task's difference (exact up to
``EXACT_PERMUTATION_MAX`` tasks, a seeded Monte Carlo estimate above). The t distribution's
CDF comes from the regularized incomplete beta function (Lentz's continued fraction).
``compare_unpaired(a, b)`` compares two independent samples (the sessions of two release arms)
by Welch's t-test, which does not assume equal variances.

>>> result = compare_paired([0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0])
>>> result.mean_difference, result.sign_p
(1.0, 0.125)
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from fulmen.errors import ConfigError

__all__ = [
    "EXACT_PERMUTATION_MAX",
    "PairedComparison",
    "UnpairedComparison",
    "compare_paired",
    "compare_unpaired",
    "mean_interval",
    "sign_test_p",
    "student_t_cdf",
    "student_t_quantile",
]

EXACT_PERMUTATION_MAX = 16  # 2**16 sign patterns; above, 20,000 seeded random ones
_MONTE_CARLO_DRAWS = 20_000
_TIE = 1e-12  # differences smaller than this count as ties


@dataclass(frozen=True)
class PairedComparison:
    """Two versions' rewards on the same tasks, compared pair by pair (difference ``B - A``).

    Attributes:
        n: tasks compared.
        mean_a / mean_b: each version's mean reward.
        mean_difference: the mean of ``b_i - a_i``.
        ci_low / ci_high: the 95% confidence interval of the mean difference (t, ``n - 1``
            degrees of freedom); both equal the mean when every difference is the same.
        t_statistic / t_p: the paired t-test (``None`` when ``n < 2`` or the differences do
            not vary: the test is undefined there).
        wins / losses / ties: tasks where B scored higher, lower, the same.
        sign_p: exact two-sided sign test over wins and losses (1.0 when all tie).
        permutation_p: two-sided sign-flip permutation test of the mean difference.
        permutation_exact: whether ``permutation_p`` enumerated every sign pattern.
    """

    n: int
    mean_a: float
    mean_b: float
    mean_difference: float
    ci_low: float
    ci_high: float
    t_statistic: float | None
    t_p: float | None
    wins: int
    losses: int
    ties: int
    sign_p: float
    permutation_p: float
    permutation_exact: bool


def compare_paired(a: Sequence[float], b: Sequence[float], *, seed: int = 0) -> PairedComparison:
    """Compare ``b`` against ``a`` task by task (see ``PairedComparison``).

    Raises ``ConfigError`` when the sequences differ in length or are empty. ``seed`` makes
    the Monte Carlo permutation estimate reproducible.
    """
    if len(a) != len(b):
        raise ConfigError(f"paired samples differ in length: {len(a)} and {len(b)}")
    if not a:
        raise ConfigError("paired comparison needs at least one task")
    diffs = [float(y) - float(x) for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    mean = statistics.fmean(diffs)
    wins = sum(d > _TIE for d in diffs)
    losses = sum(d < -_TIE for d in diffs)
    sd = statistics.stdev(diffs) if n > 1 else 0.0
    t_stat: float | None = None
    t_p: float | None = None
    low = high = mean
    if n > 1 and sd > _TIE:
        se = sd / math.sqrt(n)
        t_stat = mean / se
        t_p = min(1.0, 2.0 * (1.0 - student_t_cdf(abs(t_stat), n - 1)))
        half = student_t_quantile(0.975, n - 1) * se
        low, high = mean - half, mean + half
    permutation_p, exact = _permutation_p(diffs, seed=seed)
    return PairedComparison(
        n=n,
        mean_a=statistics.fmean(a),
        mean_b=statistics.fmean(b),
        mean_difference=mean,
        ci_low=low,
        ci_high=high,
        t_statistic=t_stat,
        t_p=t_p,
        wins=wins,
        losses=losses,
        ties=n - wins - losses,
        sign_p=sign_test_p(wins, losses),
        permutation_p=permutation_p,
        permutation_exact=exact,
    )


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Return the mean of ``values`` with its ``level`` confidence interval (Student's t).

    One value (or values that do not vary) gives an interval of zero width.
    """
    if not values:
        raise ConfigError("a mean needs at least one value")
    mean = statistics.fmean(values)
    n = len(values)
    if n < 2:
        return mean, mean, mean
    half = student_t_quantile(0.5 + level / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class UnpairedComparison:
    """Two independent samples compared by Welch's t-test (difference ``mean_b - mean_a``).

    Attributes:
        n_a / n_b: the samples' sizes.
        mean_a / mean_b: their means.
        difference: ``mean_b - mean_a``.
        ci_low / ci_high: its 95% confidence interval (Welch-Satterthwaite degrees of freedom).
        ratio: ``mean_b / mean_a``; ``None`` when ``mean_a`` is not positive (undefined).
        t_statistic / df: the test's statistic and degrees of freedom (``None`` when neither
            sample varies: every value of each is its mean).
        p_value: two-sided; with no variance, 1.0 for equal means and 0.0 otherwise.
    """

    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    difference: float
    ci_low: float
    ci_high: float
    ratio: float | None
    t_statistic: float | None
    df: float | None
    p_value: float


def compare_unpaired(a: Sequence[float], b: Sequence[float]) -> UnpairedComparison:
    """Compare independent samples ``a`` and ``b`` by Welch's t-test (see the result type).

    Raises ``ConfigError`` unless each sample holds at least two values.
    """
    if len(a) < 2 or len(b) < 2:
        raise ConfigError(f"Welch's test needs two values per sample, got {len(a)} and {len(b)}")
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    difference = mean_b - mean_a
    ratio = mean_b / mean_a if mean_a > 0 else None
    se = math.sqrt(va + vb)
    if se <= _TIE:
        p = 1.0 if abs(difference) <= _TIE else 0.0
        return UnpairedComparison(
            len(a), len(b), mean_a, mean_b, difference, difference, difference, ratio, None, None, p
        )
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t = difference / se
    p = min(1.0, 2.0 * (1.0 - student_t_cdf(abs(t), df)))
    half = student_t_quantile(0.975, df) * se
    return UnpairedComparison(
        len(a), len(b), mean_a, mean_b, difference, difference - half, difference + half, ratio,
        t, df, p,
    )  # fmt: skip


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided binomial p-value of ``wins`` against ``losses`` at one half each.

    >>> sign_test_p(9, 0)
    0.00390625
    """
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def _permutation_p(diffs: Sequence[float], *, seed: int) -> tuple[float, bool]:
    """Share of sign patterns whose |sum| reaches the observed |sum| (the identity counts)."""
    observed = abs(sum(diffs)) - 1e-9
    magnitudes = [abs(d) for d in diffs]
    n = len(magnitudes)
    if n <= EXACT_PERMUTATION_MAX:
        # The sums of every subset of magnitudes, built by doubling: 2**n values.
        sums = [0.0]
        for m in magnitudes:
            sums = [s + m for s in sums] + sums
        total = sum(magnitudes)
        # A subset S flipped positive, the rest negative: sum = 2 * sum(S) - total.
        extreme = sum(abs(2.0 * s - total) >= observed for s in sums)
        return extreme / len(sums), True
    rng = random.Random(seed)
    extreme = 1  # the observed pattern itself, so the estimate is never 0
    for _ in range(_MONTE_CARLO_DRAWS):
        flipped = sum(m if rng.random() < 0.5 else -m for m in magnitudes)
        extreme += abs(flipped) >= observed
    return extreme / (_MONTE_CARLO_DRAWS + 1), False


def student_t_cdf(t: float, df: float) -> float:
    """Return P(T <= ``t``) for Student's t with ``df`` degrees of freedom.

    >>> round(student_t_cdf(2.131449545559323, 15), 6)
    0.975
    """
    if df < 1:
        raise ConfigError(f"degrees of freedom must be at least 1, got {df}")
    x = df / (df + t * t)
    tail = 0.5 * _regularized_beta(x, df / 2.0, 0.5)
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: float) -> float:
    """Return the ``t`` with ``student_t_cdf(t, df) == p`` (bisection to 1e-10).

    >>> round(student_t_quantile(0.975, 1), 4)
    12.7062
    """
    if not 0.0 < p < 1.0:
        raise ConfigError(f"quantile probability must lie in (0, 1), got {p}")
    low, high = -1e6, 1e6
    for _ in range(200):
        mid = (low + high) / 2.0
        if student_t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-10:
            break
    return (low + high) / 2.0


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), by the continued fraction on whichever side converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    """Evaluate the incomplete beta continued fraction (modified Lentz, Numerical Recipes)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 3e-16:
            break
    return h
