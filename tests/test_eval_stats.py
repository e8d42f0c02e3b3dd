"""Intervals and tests of orchestrator/eval/stats.py against published and hand-computed values.

Wilson intervals: Newcombe, "Two-sided confidence intervals for the single proportion" (Statistics in
Medicine 17, 1998), Table I, method 3. The permutation test on one scenario is Fisher's exact test:
Fisher's tea-tasting table (4 of 4 against 0 of 4) has the two-sided p-value 2/C(8,4) = 2/70.
"""

from __future__ import annotations

from math import comb

import pytest

from orchestrator.eval.runner import EvalRun, RunOutcome
from orchestrator.eval.scoring import score
from orchestrator.eval.stats import (
    Counts,
    bootstrap_pass_hat,
    flip_rate,
    paired_test,
    runs_for_width,
    wilson,
    z_value,
)

Z95 = 1.959963984540054


def test_the_normal_quantile_matches_the_tables() -> None:
    assert z_value(0.95) == pytest.approx(Z95, abs=1e-9)
    assert z_value(0.90) == pytest.approx(1.644854, abs=1e-6)
    assert z_value(0.99) == pytest.approx(2.575829, abs=1e-6)
    for bad in (0.0, 1.0, 95.0):
        with pytest.raises(ValueError, match="confidence must be between 0 and 1"):
            z_value(bad)


@pytest.mark.parametrize(
    ("passed", "runs", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_matches_newcombe_1998(passed: int, runs: int, low: float, high: float) -> None:
    interval = wilson(passed, runs)
    assert (round(interval.low, 4), round(interval.high, 4)) == (low, high)
    assert interval.estimate == passed / runs and interval.method == "wilson"


def test_wilson_at_all_pass_and_all_fail() -> None:
    # at c = n the lower bound is n / (n + z²); at c = 0 the upper bound is z² / (n + z²)
    for n in (1, 3, 15, 29):
        top, bottom = wilson(n, n), wilson(0, n)
        assert top.high == 1.0 and top.low == pytest.approx(n / (n + Z95**2))
        assert bottom.low == 0.0 and bottom.high == pytest.approx(Z95**2 / (n + Z95**2))
    assert round(wilson(29, 29).low, 4) == 0.8830  # Newcombe's 29/29
    assert wilson(3, 3, 0.99).low < wilson(3, 3, 0.95).low < wilson(3, 3, 0.80).low
    with pytest.raises(ValueError, match="wilson needs runs >= 1"):
        wilson(4, 3)


def test_runs_for_width() -> None:
    # all passing: n / (n + z²) >= 0.9 needs n >= 9 z² = 34.6
    assert runs_for_width(1.0, 0.1) == 35 and wilson(35, 35).width <= 0.1 < wilson(34, 34).width
    assert runs_for_width(0.5, 0.1) == 100  # ~380 are needed: capped
    assert runs_for_width(0.5, 0.1, most=1000) == 381
    with pytest.raises(ValueError, match="target width must be in"):
        runs_for_width(0.5, 0.0)


def test_flip_rate_is_the_share_against_the_majority() -> None:
    assert flip_rate(3, 2) == pytest.approx(1 / 3) and flip_rate(4, 2) == 0.5
    assert flip_rate(3, 3) == 0.0 and flip_rate(3, 0) == 0.0


def test_bootstrap_of_one_scenario_is_the_binomial_percentile_interval() -> None:
    # one scenario, 5 of 10: resampled passes ~ Binomial(10, 0.5); its 2.5% and 97.5% quantiles are 2 and 8
    interval = bootstrap_pass_hat([Counts(10, 5)], 1)
    assert (interval.low, interval.estimate, interval.high) == (pytest.approx(0.2), 0.5, pytest.approx(0.8))
    assert interval.method == "bootstrap"


def test_bootstrap_at_k_equal_n_all_pass_and_all_fail() -> None:
    # k = n with a flaky scenario: pass^3 of 2/3 is 0, of 3/3 is 1
    mixed = [Counts(3, 3), Counts(3, 3), Counts(3, 3), Counts(3, 2), Counts(3, 0)]
    interval = bootstrap_pass_hat(mixed, 3)
    assert interval.estimate == pytest.approx(0.6) and interval.low <= 0.6 <= interval.high
    assert interval == bootstrap_pass_hat(mixed, 3)  # seeded: the same every time
    # every run passed (15 of 15): resampling cannot move, so Wilson over the runs, to the k-th power
    everything = bootstrap_pass_hat([Counts(3, 3)] * 5, 3)
    assert everything.estimate == 1.0 and everything.high == 1.0 and everything.method == "wilson^k"
    assert everything.low == pytest.approx((15 / (15 + Z95**2)) ** 3)
    nothing = bootstrap_pass_hat([Counts(3, 0)] * 5, 2)
    assert nothing.estimate == 0.0 and nothing.low == 0.0
    assert nothing.high == pytest.approx((Z95**2 / (15 + Z95**2)) ** 2)
    with pytest.raises(ValueError, match="every scenario with at least k runs"):
        bootstrap_pass_hat([Counts(2, 1)], 3)


def test_a_wider_confidence_gives_a_wider_interval() -> None:
    counts = [Counts(5, 5), Counts(5, 3), Counts(5, 1), Counts(5, 4)]
    narrow, wide = bootstrap_pass_hat(counts, 2, 0.8), bootstrap_pass_hat(counts, 2, 0.99)
    assert wide.low <= narrow.low and wide.high >= narrow.high and wide.width > narrow.width


def test_the_permutation_test_on_one_scenario_is_fishers_exact_test() -> None:
    tea = paired_test([(Counts(4, 0), Counts(4, 4))], 1, resamples=20000)
    assert tea.p_value == pytest.approx(2 / comb(8, 4), abs=0.006)  # 0.0286
    assert tea.verdict == "better" and tea.difference.estimate == 1.0
    small = paired_test([(Counts(3, 0), Counts(3, 3))], 1, resamples=20000)
    assert small.p_value == pytest.approx(2 / comb(6, 3), abs=0.01)  # 0.1: three runs cannot tell
    assert small.verdict == "not distinguishable" and small.runs_needed is not None and small.runs_needed > 3


def test_paired_test_better_worse_and_indistinguishable() -> None:
    a = [Counts(10, 2), Counts(10, 3), Counts(10, 5), Counts(10, 4), Counts(10, 10)]
    b = [Counts(10, 9), Counts(10, 10), Counts(10, 8), Counts(10, 9), Counts(10, 10)]
    better = paired_test(list(zip(a, b, strict=True)), 1)
    assert better.verdict == "better" and better.p_value < 0.01
    assert better.difference.low > 0 and better.difference.estimate == pytest.approx(0.44)
    worse = paired_test(list(zip(b, a, strict=True)), 2)
    assert worse.verdict == "worse" and worse.difference.high < 0
    same = paired_test(list(zip(a, a, strict=True)), 3)
    assert same.verdict == "not distinguishable" and same.p_value == 1.0 and same.runs_needed is None
    assert same.difference.low <= 0 <= same.difference.high
    close = [(Counts(3, 2), Counts(3, 1))] + [(Counts(3, 3), Counts(3, 3))] * 4
    result = paired_test(close, 1)
    assert result.verdict == "not distinguishable" and result.runs_needed is not None and result.runs_needed > 3
    with pytest.raises(ValueError, match="each with at least 4 runs"):
        paired_test(close, 4)


def _eval(outcomes: dict[str, list[bool]]) -> EvalRun:
    runs = [
        RunOutcome(scenario=sid, index=i + 1, passed=ok) for sid, oks in outcomes.items() for i, ok in enumerate(oks)
    ]
    return EvalRun(suite="s.yaml", agent="ag", source="replay", models={}, k=dict.fromkeys(outcomes, 3), runs=runs)


def test_score_carries_intervals_flaky_and_failing() -> None:
    s = score(_eval({"ok": [True] * 3, "flaky": [True, False, True], "bad": [False] * 3}), confidence=0.9)
    assert s.confidence == 0.9 and set(s.intervals) == {1, 2, 3}
    expected = wilson(5, 9, 0.9)  # pass^1 = 5/9 over nine runs
    assert (s.intervals[1].low, s.intervals[1].high) == (pytest.approx(expected.low), pytest.approx(expected.high))
    assert s.intervals[3].estimate == pytest.approx(1 / 3) and s.intervals[3].method == "bootstrap"
    assert s.flaky == ["flaky"] and s.failing == ["bad"]
    by_id = {x.id: x for x in s.scenarios}
    assert by_id["flaky"].status == "flaky" and by_id["flaky"].flip_rate == pytest.approx(1 / 3)
    assert by_id["ok"].status == "passes" and by_id["ok"].interval == wilson(3, 3, 0.9)
