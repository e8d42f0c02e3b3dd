"""What changed between two eval reports (a model or a prompt change), and whether it is real.

Scenario by scenario it shows the passed runs before and after. For the suite it tests, paired
by scenario, whether B's pass^1 and pass^k differ from A's by more than chance
(`orchestrator.eval.stats.paired_test`): the interval of the difference, a verdict (better,
worse, not distinguishable at this k) and how many runs per scenario would tell the observed
difference apart. `orchestrator eval compare A B --fail-if worse` turns the verdict into an
exit code for CI.
"""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator.eval.report import Report
from orchestrator.eval.scoring import ScenarioScore
from orchestrator.eval.stats import DEFAULT_CONFIDENCE, Counts, Difference, paired_test

__all__ = ["Change", "compare", "compare_markdown", "differences"]


class Change(BaseModel):
    scenario: str
    before: ScenarioScore | None  # None: only in the second report
    after: ScenarioScore | None  # None: only in the first
    verdict: str  # better, worse, same, added, removed
    checks_now_failing: list[str]
    checks_now_passing: list[str]


def _verdict(before: ScenarioScore | None, after: ScenarioScore | None) -> str:
    if before is None:
        return "added"
    if after is None:
        return "removed"
    if after.pass_rate > before.pass_rate:
        return "better"
    if after.pass_rate < before.pass_rate:
        return "worse"
    return "same"


def compare(a: Report, b: Report) -> list[Change]:
    first = {s.id: s for s in a.score.scenarios}
    second = {s.id: s for s in b.score.scenarios}
    changes = []
    for sid in [*first, *(x for x in second if x not in first)]:
        before, after = first.get(sid), second.get(sid)
        failing_before = set(before.check_failures) if before else set()
        failing_after = set(after.check_failures) if after else set()
        changes.append(
            Change(
                scenario=sid,
                before=before,
                after=after,
                verdict=_verdict(before, after),
                checks_now_failing=sorted(failing_after - failing_before),
                checks_now_passing=sorted(failing_before - failing_after),
            )
        )
    return changes


def differences(a: Report, b: Report, confidence: float = DEFAULT_CONFIDENCE) -> list[Difference]:
    """The paired tests of pass^1 and of pass^k (k: the fewest runs any shared scenario has in either).

    Only scenarios both reports ran are compared (a scenario added or removed is not a difference
    in how the agent does). Empty when they share none."""
    first = {s.id: s for s in a.score.scenarios}
    pairs = [(first[s.id], s) for s in b.score.scenarios if s.id in first]
    if not pairs:
        return []
    counts = [(Counts(x.runs, x.passed), Counts(y.runs, y.passed)) for x, y in pairs]
    k = min(min(x.runs, y.runs) for x, y in pairs)
    return [paired_test(counts, j, confidence) for j in sorted({1, k})]


def _difference_lines(found: list[Difference], names: tuple[str, str], confidence: float) -> list[str]:
    if not found:
        return ["", "No scenario is in both reports: nothing to test."]
    level = f"{confidence * 100:g}%"
    lines = ["", f"### Is the difference real? (paired by scenario, {level} confidence)", ""]
    lines += [f"| rate | {names[0]} | {names[1]} | difference [{level} interval] | p | verdict | k needed |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for d in found:
        iv = d.difference
        verdict = d.verdict if d.verdict != "not distinguishable" else f"not distinguishable at k={d.runs}"
        needed = "-" if d.runs_needed is None else str(d.runs_needed)
        lines.append(
            f"| pass^{d.k} | {d.a * 100:.0f}% | {d.b * 100:.0f}% | {iv.estimate * 100:+.0f} points "
            f"[{iv.low * 100:+.0f}, {iv.high * 100:+.0f}] | {d.p_value:.3f} | **{verdict}** | {needed} |"
        )
    last = found[-1]
    if last.verdict == "not distinguishable" and last.runs_needed is not None:
        lines += [
            "",
            f"A difference of {abs(last.difference.estimate) * 100:.0f} points in pass^{last.k} would need about "
            f"{last.runs_needed} runs per scenario to stand out (if the spread is run-to-run noise).",
        ]
    return lines


def _cell(score: ScenarioScore | None) -> str:
    if score is None:
        return "-"
    return f"{score.passed}/{score.runs} (pass^{score.runs} {score.pass_hat[score.runs] * 100:.0f}%)"


def compare_markdown(
    a: Report,
    b: Report,
    names: tuple[str, str] = ("A", "B"),
    confidence: float = DEFAULT_CONFIDENCE,
    found: list[Difference] | None = None,
) -> str:
    """The comparison for people: the scenarios' table, the suites' totals and the paired tests."""
    changes = compare(a, b)
    lines = [
        f"## Eval compare: {names[0]} → {names[1]}",
        "",
        f"| scenario | {names[0]} | {names[1]} | change | newly failing | newly passing |",
        "|---|---|---|---|---|---|",
    ]
    for ch in changes:
        marker = {"better": "▲ better", "worse": "▼ worse"}.get(ch.verdict, ch.verdict)
        lines.append(
            f"| {ch.scenario} | {_cell(ch.before)} | {_cell(ch.after)} | {marker} | "
            f"{'; '.join(ch.checks_now_failing) or '-'} | {'; '.join(ch.checks_now_passing) or '-'} |"
        )
    ka, kb = a.score.k, b.score.k
    overall_a = f"pass^{ka} {a.score.pass_hat[ka] * 100:.0f}%" if ka else "no runs"
    overall_b = f"pass^{kb} {b.score.pass_hat[kb] * 100:.0f}%" if kb else "no runs"
    lines += [
        "",
        f"Overall: {names[0]} {overall_a}, {a.score.passed}/{a.score.runs} runs, ${a.score.cost:.4f}; "
        f"{names[1]} {overall_b}, {b.score.passed}/{b.score.runs} runs, ${b.score.cost:.4f}",
    ]
    worse = sum(ch.verdict == "worse" for ch in changes)
    better = sum(ch.verdict == "better" for ch in changes)
    lines.append(f"{better} scenario(s) better, {worse} worse.")
    lines += _difference_lines(differences(a, b, confidence) if found is None else found, names, confidence)
    return "\n".join(lines) + "\n"
