"""How sure a pass rate is: intervals, flaky scenarios, and whether two evals really differ.

An eval's numbers come from a few runs of a few scenarios, so two identical evals
differ by chance (tau2-bench measured 5-10 points between single runs). This module
says how much:

- `wilson`: the Wilson score interval of a pass rate (c of n runs). It stays inside
  [0, 1] and is not empty at 0/n or n/n, unlike the textbook p ± z·sqrt(p(1-p)/n).
- `bootstrap_pass_hat`: the interval of the suite's pass^k, the mean over scenarios of
  C(c, k)/C(n, k), by resampling scenarios and, inside each, its runs.
- `paired_test`: whether suite B's pass^k differs from A's, paired by scenario: a
  permutation test (shuffling A's and B's runs within each scenario) for the p-value and
  a paired bootstrap for the interval of the difference.

Everything random takes a seed (`random.Random(seed)`), so a report is the same every
time it is built from the same runs. No scipy: the normal quantile is the stdlib's
`statistics.NormalDist`.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil, comb, sqrt
from statistics import NormalDist

from pydantic import BaseModel

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "Counts",
    "Difference",
    "Interval",
    "bootstrap_pass_hat",
    "flip_rate",
    "paired_test",
    "runs_for_width",
    "wilson",
    "z_value",
]

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
SEED = 20240607  # fixed: the same runs give the same report


class Interval(BaseModel):
    """A rate's estimate and the range that holds the true rate with the stated confidence."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str  # "wilson", "bootstrap", "wilson^k" (see the module docstring)

    @property
    def width(self) -> float:
        return self.high - self.low


@dataclass(frozen=True)
class Counts:
    """One scenario's runs: n of them, c passed."""

    runs: int
    passed: int


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (e.g. 0.95); got {confidence}")


def z_value(confidence: float) -> float:
    """The two-sided normal quantile: 1.96 for 0.95."""
    _check_confidence(confidence)
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(passed: float, runs: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """The Wilson score interval of passed/runs (passed may be a mean of rates times runs)."""
    if runs < 1 or not 0 <= passed <= runs:
        raise ValueError(f"wilson needs runs >= 1 and 0 <= passed <= runs; got passed={passed}, runs={runs}")
    z = z_value(confidence)
    p = passed / runs
    scale = 1 + z * z / runs
    centre = (p + z * z / (2 * runs)) / scale
    half = z / scale * sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs))
    # at 0/n and n/n the formula gives exactly 0 and 1; rounding must not push them past
    low = 0.0 if passed == 0 else max(0.0, centre - half)
    high = 1.0 if passed == runs else min(1.0, centre + half)
    return Interval(estimate=p, low=low, high=high, confidence=confidence, method="wilson")


def runs_for_width(rate: float, width: float, confidence: float = DEFAULT_CONFIDENCE, most: int = 100) -> int:
    """The fewest runs whose Wilson interval at this pass rate is at most `width` wide (capped at `most`)."""
    if not 0 < width <= 1:
        raise ValueError(f"the target width must be in (0, 1] (e.g. 0.1); got {width}")
    for n in range(1, most + 1):
        if wilson(rate * n, n, confidence).width <= width:
            return n
    return most


def _binomial_cdf(n: int, p: float) -> list[float]:
    """P(X <= j) for j = 0..n: resampling n runs with replacement draws the passes from Binomial(n, p)."""
    cdf, total = [], 0.0
    for j in range(n + 1):
        total += comb(n, j) * p**j * (1 - p) ** (n - j)
        cdf.append(total)
    cdf[-1] = 1.0
    return cdf


def _hypergeometric_cdf(passes: int, runs: int, drawn: int) -> list[float]:
    """P(X <= j) for j = 0..drawn: the passes among `drawn` of `runs` shuffled runs, `passes` of them passing."""
    cdf, total, ways = [], 0.0, comb(runs, drawn)
    for j in range(drawn + 1):
        total += comb(passes, j) * comb(runs - passes, drawn - j) / ways
        cdf.append(total)
    cdf[-1] = 1.0
    return cdf


def _draw(cdf: list[float], rng: random.Random) -> int:
    return min(bisect_left(cdf, rng.random()), len(cdf) - 1)


def _pass_hat(passed: int, runs: int, k: int) -> float:
    return comb(passed, k) / comb(runs, k)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation (numpy's default)."""
    position = q * (len(sorted_values) - 1)
    lower = int(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * (position - lower)


def bootstrap_pass_hat(
    scenarios: Sequence[Counts],
    k: int,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """The suite's pass^k (mean over scenarios of C(c,k)/C(n,k)) with a two-level percentile bootstrap.

    Each resample draws as many scenarios as there are, with replacement, and for each one
    its n runs with replacement. When no scenario varies at all (every run passed, or every
    run failed) resampling cannot move the estimate, so the interval is Wilson's over all runs
    raised to the k-th power (the pass^k of a rate p is p^k): seeing no failure in 15 runs does
    not prove there is none."""
    _check_confidence(confidence)
    if not scenarios or any(s.runs < k for s in scenarios) or k < 1:
        raise ValueError(f"pass^{k} needs k >= 1 and every scenario with at least k runs")
    estimate = sum(_pass_hat(s.passed, s.runs, k) for s in scenarios) / len(scenarios)
    if all(s.passed in (0, s.runs) for s in scenarios):
        runs = sum(s.runs for s in scenarios)
        rate = wilson(sum(s.passed for s in scenarios), runs, confidence)
        low, high = rate.low**k, rate.high**k
        return Interval(estimate=estimate, low=low, high=high, confidence=confidence, method="wilson^k")
    rng = random.Random(seed)
    cdfs = [_binomial_cdf(s.runs, s.passed / s.runs) for s in scenarios]
    values = []
    for _ in range(resamples):
        total = 0.0
        for _ in scenarios:
            i = rng.randrange(len(scenarios))
            total += _pass_hat(_draw(cdfs[i], rng), scenarios[i].runs, k)
        values.append(total / len(scenarios))
    values.sort()
    tail = (1 - confidence) / 2
    low, high = _percentile(values, tail), _percentile(values, 1 - tail)
    # the percentile interval of a skewed statistic can miss the estimate by rounding; keep it inside
    low, high = min(low, estimate), max(high, estimate)
    return Interval(estimate=estimate, low=low, high=high, confidence=confidence, method="bootstrap")


def flip_rate(runs: int, passed: int) -> float:
    """The share of runs that went against the scenario's majority outcome (0: always the same)."""
    if runs < 1:
        return 0.0
    return min(passed, runs - passed) / runs


class Difference(BaseModel):
    """B's pass^k minus A's, paired by scenario, and whether it is more than chance."""

    k: int  # of pass^k
    runs: int  # the fewest runs per scenario either eval has: the k of "not distinguishable at this k"
    a: float
    b: float
    difference: Interval  # of b - a
    p_value: float  # two-sided, permutation test
    verdict: str  # "better", "worse", "not distinguishable"
    runs_needed: int | None  # runs per scenario that would tell this difference apart; None: nothing to tell


def paired_test(
    pairs: Sequence[tuple[Counts, Counts]],
    k: int,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = SEED,
) -> Difference:
    """Is B's pass^k different from A's? `pairs`: (A's counts, B's counts) per scenario both ran.

    p-value: a permutation test stratified by scenario. If the change did nothing, A's and
    B's runs of a scenario are interchangeable; shuffling them (the passes that land in A
    follow the hypergeometric law) and recomputing the mean difference many times shows how
    often chance alone gives one as large as the one observed. Interval: a paired bootstrap
    (the same scenarios drawn for both, runs resampled inside each). Verdict: better or worse
    when the p-value is below 1 - confidence, else "not distinguishable"."""
    _check_confidence(confidence)
    if not pairs or k < 1 or any(a.runs < k or b.runs < k for a, b in pairs):
        raise ValueError(f"comparing pass^{k} needs scenarios both evals ran, each with at least {k} runs")
    rng = random.Random(seed)

    def mean_difference(counts: Sequence[tuple[int, int]]) -> float:
        pairs_counts = zip(pairs, counts, strict=True)
        total = sum(_pass_hat(cb, b.runs, k) - _pass_hat(ca, a.runs, k) for (a, b), (ca, cb) in pairs_counts)
        return total / len(pairs)

    a_mean = sum(_pass_hat(a.passed, a.runs, k) for a, _ in pairs) / len(pairs)
    b_mean = sum(_pass_hat(b.passed, b.runs, k) for _, b in pairs) / len(pairs)
    observed = b_mean - a_mean
    shuffles = [_hypergeometric_cdf(a.passed + b.passed, a.runs + b.runs, a.runs) for a, b in pairs]
    extreme = 0
    for _ in range(resamples):
        shuffled = []
        for (a, b), cdf in zip(pairs, shuffles, strict=True):
            in_a = _draw(cdf, rng)
            shuffled.append((in_a, a.passed + b.passed - in_a))
        extreme += abs(mean_difference(shuffled)) >= abs(observed) - 1e-12
    p_value = (extreme + 1) / (resamples + 1)  # the observed split counts as one of the shuffles
    interval = _paired_bootstrap(pairs, k, confidence, resamples, rng, observed)
    alpha = 1 - confidence
    verdict = "not distinguishable"
    if p_value < alpha and observed != 0:
        verdict = "better" if observed > 0 else "worse"
    return Difference(
        k=k,
        runs=min(min(a.runs, b.runs) for a, b in pairs),
        a=a_mean,
        b=b_mean,
        difference=interval,
        p_value=p_value,
        verdict=verdict,
        runs_needed=_runs_needed(pairs, observed, interval, confidence, verdict),
    )


def _paired_bootstrap(
    pairs: Sequence[tuple[Counts, Counts]],
    k: int,
    confidence: float,
    resamples: int,
    rng: random.Random,
    observed: float,
) -> Interval:
    cdfs = [(_binomial_cdf(a.runs, a.passed / a.runs), _binomial_cdf(b.runs, b.passed / b.runs)) for a, b in pairs]
    values = []
    for _ in range(resamples):
        total = 0.0
        for _ in pairs:
            i = rng.randrange(len(pairs))
            (a, b), (cdf_a, cdf_b) = pairs[i], cdfs[i]
            total += _pass_hat(_draw(cdf_b, rng), b.runs, k) - _pass_hat(_draw(cdf_a, rng), a.runs, k)
        values.append(total / len(pairs))
    values.sort()
    tail = (1 - confidence) / 2
    low, high = min(_percentile(values, tail), observed), max(_percentile(values, 1 - tail), observed)
    return Interval(estimate=observed, low=low, high=high, confidence=confidence, method="paired bootstrap")


def _runs_needed(
    pairs: Sequence[tuple[Counts, Counts]], observed: float, interval: Interval, confidence: float, verdict: str
) -> int | None:
    """Runs per scenario for the observed difference to stand out, if the spread is run-to-run noise.

    The interval's half-width shrinks as 1/sqrt(runs); the difference is told apart once the
    half-width is below it. With no difference observed there is nothing to tell apart (None)."""
    runs = min(min(a.runs, b.runs) for a, b in pairs)
    if verdict != "not distinguishable":
        return runs
    if observed == 0:
        return None
    half = max(interval.high - interval.estimate, interval.estimate - interval.low)
    if half == 0:  # no spread in the resamples, yet not significant: too few runs to shuffle at all
        z = z_value(confidence)
        half = z * sqrt(0.25 / runs)
    return max(runs + 1, ceil(runs * (half / abs(observed)) ** 2))
