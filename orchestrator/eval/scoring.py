"""Scoring an eval: pass rates and pass^k, per scenario and overall.

pass^k (tau-bench) is the chance that k independent tries of a scenario all
succeed. With n runs of a scenario of which c passed, the unbiased estimate is
C(c, k) / C(n, k): of all k-subsets of the n runs, the share made only of
passing runs. The suite's pass^k is the mean of that over its scenarios.
pass^1 is the plain pass rate; pass^n asks that every run passed.

Every rate carries its interval at the report's confidence (orchestrator/eval/stats.py):
a scenario's pass rate and the suite's pass^1 Wilson's, the suite's pass^k a bootstrap
over scenarios and runs. A scenario that both passed and failed in one eval is flaky;
its flip rate is the share of runs that went against its majority.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from math import comb
from typing import Literal

from pydantic import BaseModel, Field

from orchestrator.eval.runner import EvalRun, RunOutcome
from orchestrator.eval.stats import DEFAULT_CONFIDENCE, Counts, Interval, bootstrap_pass_hat, flip_rate, wilson

__all__ = ["ScenarioScore", "Score", "pass_hat_k", "score"]


def pass_hat_k(runs: int, passed: int, k: int) -> float:
    """C(passed, k) / C(runs, k): the chance that k runs drawn from these all passed."""
    if not 0 <= passed <= runs or not 1 <= k <= runs:
        raise ValueError(
            f"pass^k needs 0 <= passed <= runs and 1 <= k <= runs; got runs={runs}, passed={passed}, k={k}"
        )
    return comb(passed, k) / comb(runs, k)


class ScenarioScore(BaseModel):
    id: str
    runs: int
    passed: int
    pass_rate: float
    pass_hat: dict[int, float]  # k -> pass^k, for k = 1..runs
    all_passed: bool  # pass^k at k = runs
    check_failures: dict[str, int]  # check label -> runs it failed in
    errors: int  # runs that ended in an error (provider, replay mismatch...)
    input_tokens: int
    output_tokens: int
    cost: float
    seconds: float  # summed over runs
    mean_steps: float
    mean_turns: float
    interval: Interval | None = None  # of the pass rate (Wilson); None in reports written before intervals
    flip_rate: float = 0.0  # share of runs against the majority outcome
    status: Literal["passes", "fails", "flaky"] = "passes"  # every run passed / none did / some did


class Score(BaseModel):
    scenarios: list[ScenarioScore]
    k: int  # the largest k every scenario has enough runs for
    pass_hat: dict[int, float]  # k -> mean pass^k over scenarios, k = 1..k
    runs: int
    passed: int
    skipped: int
    stopped_on_budget: bool
    input_tokens: int
    output_tokens: int
    cost: float
    seconds: float  # wall time of the whole eval
    confidence: float = DEFAULT_CONFIDENCE
    # k -> interval of the suite's pass^k (k = 1: Wilson over all runs, k > 1: bootstrap)
    intervals: dict[int, Interval] = Field(default_factory=dict)
    flaky: list[str] = Field(default_factory=list)  # scenarios that passed and failed in this eval
    failing: list[str] = Field(default_factory=list)  # scenarios that failed every run


def _scenario(scenario_id: str, runs: Sequence[RunOutcome], confidence: float) -> ScenarioScore:
    n, c = len(runs), sum(r.passed for r in runs)
    failures: Counter[str] = Counter()
    for run in runs:
        failures.update({check.label for check in run.checks if not check.passed})
    return ScenarioScore(
        id=scenario_id,
        runs=n,
        passed=c,
        pass_rate=c / n,
        pass_hat={k: pass_hat_k(n, c, k) for k in range(1, n + 1)},
        all_passed=c == n,
        check_failures=dict(failures),
        errors=sum(r.error is not None for r in runs),
        input_tokens=sum(r.input_tokens for r in runs),
        output_tokens=sum(r.output_tokens for r in runs),
        cost=round(sum(r.cost for r in runs), 6),
        seconds=round(sum(r.seconds for r in runs), 3),
        mean_steps=sum(r.steps for r in runs) / n,
        mean_turns=sum(r.turns for r in runs) / n,
        interval=wilson(c, n, confidence),
        flip_rate=flip_rate(n, c),
        status="passes" if c == n else "fails" if c == 0 else "flaky",
    )


def score(result: EvalRun, confidence: float = DEFAULT_CONFIDENCE) -> Score:
    """The eval's pass rates and pass^k, per scenario and overall, each with its interval."""
    by_scenario: dict[str, list[RunOutcome]] = {}
    for run in sorted(result.runs, key=lambda r: r.index):
        by_scenario.setdefault(run.scenario, []).append(run)
    scenarios = [_scenario(sid, by_scenario[sid], confidence) for sid in result.k if sid in by_scenario]
    k = min((s.runs for s in scenarios), default=0)
    overall = {j: sum(s.pass_hat[j] for s in scenarios) / len(scenarios) for j in range(1, k + 1)}
    return Score(
        scenarios=scenarios,
        k=k,
        pass_hat=overall,
        runs=len(result.runs),
        passed=sum(r.passed for r in result.runs),
        skipped=result.skipped,
        stopped_on_budget=result.stopped_on_budget,
        input_tokens=sum(s.input_tokens for s in scenarios),
        output_tokens=sum(s.output_tokens for s in scenarios),
        cost=round(sum(s.cost for s in scenarios), 6),
        seconds=result.seconds,
        confidence=confidence,
        intervals=_intervals(scenarios, overall, k, confidence),
        flaky=[s.id for s in scenarios if s.status == "flaky"],
        failing=[s.id for s in scenarios if s.status == "fails"],
    )


def _intervals(
    scenarios: Sequence[ScenarioScore], overall: dict[int, float], k: int, confidence: float
) -> dict[int, Interval]:
    if not scenarios:
        return {}
    runs = sum(s.runs for s in scenarios)
    counts = [Counts(s.runs, s.passed) for s in scenarios]
    intervals = {1: wilson(overall[1] * runs, runs, confidence)}
    intervals.update({j: bootstrap_pass_hat(counts, j, confidence) for j in range(2, k + 1)})
    return intervals
