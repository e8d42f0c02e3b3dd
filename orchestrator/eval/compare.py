"""What changed between two eval reports (a model or a prompt change), scenario by scenario."""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator.eval.report import Report
from orchestrator.eval.scoring import ScenarioScore

__all__ = ["Change", "compare", "compare_markdown"]


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


def _cell(score: ScenarioScore | None) -> str:
    if score is None:
        return "-"
    return f"{score.passed}/{score.runs} (pass^{score.runs} {score.pass_hat[score.runs] * 100:.0f}%)"


def compare_markdown(a: Report, b: Report, names: tuple[str, str] = ("A", "B")) -> str:
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
    return "\n".join(lines) + "\n"
