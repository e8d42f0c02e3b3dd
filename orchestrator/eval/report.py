"""An eval's results for people (Markdown), machines (JSON) and CI (JUnit XML).

The JSON holds every run (checks with reasons, thread ids, cassettes) and the
score, so `orchestrator eval compare` and other tools need nothing else.
"""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel

from orchestrator.eval.runner import EvalRun, RunOutcome
from orchestrator.eval.scoring import ScenarioScore, Score, score
from orchestrator.eval.stats import DEFAULT_CONFIDENCE, Interval

__all__ = ["Report", "build_report", "junit_xml", "load_report", "markdown", "replay_command", "write_json"]


class Report(BaseModel):
    version: int = 1
    eval: EvalRun
    score: Score


def build_report(result: EvalRun, confidence: float = DEFAULT_CONFIDENCE) -> Report:
    """The runs and their score, each rate with its interval at `confidence` (e.g. 0.95)."""
    return Report(eval=result, score=score(result, confidence))


def load_report(path: str | Path) -> Report:
    try:
        return Report.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the report: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not an eval report (JSON from `orchestrator eval --json`): {exc}") from None


def replay_command(run: RunOutcome) -> str:
    return f"orchestrator eval replay {shlex.quote(run.cassette or '?')}"


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _range(interval: Interval | None) -> str:
    """`[52–88%]`: the interval of a rate, shown next to it."""
    if interval is None:
        return ""
    return f" [{interval.low * 100:.0f}–{interval.high * 100:.0f}%]"


def _escape(cell: str) -> str:
    """A table cell's own pipes (a regex check's label) must not split it."""
    return cell.replace("|", "\\|").replace("\n", " ")


def markdown(report: Report) -> str:
    s, run = report.score, report.eval
    most = max((x.runs for x in s.scenarios), default=0)
    # pass^1..5 and the suite's k: a column per k of 20 runs would bury the table (the JSON has every k)
    ks = sorted(k for k in {1, 2, 3, 4, 5, s.k} if 1 <= k <= most)
    level = f"{s.confidence * 100:g}%"
    hat_heads = [f"pass^{k}" + (f" [{level} interval]" if k == 1 else "") for k in ks]
    head = ["scenario", "runs", "passed", *hat_heads, "flips"]
    head += ["failing checks", "tokens", "cost", "time"]
    head += ["steps", "turns"]
    rows = [_scenario_row(x, ks) for x in s.scenarios]
    overall = [_pct(s.pass_hat[k]) + _range(s.intervals.get(k)) if k in s.pass_hat else "" for k in ks]
    tokens = str(s.input_tokens + s.output_tokens)
    rows.append(["**overall**", str(s.runs), f"{s.passed}/{s.runs}", *overall, "", "", tokens, f"${s.cost:.4f}"])
    rows[-1] += [f"{s.seconds:.1f}s", "", ""]
    models = f", models {', '.join(f'{k}={v}' for k, v in run.models.items())}" if run.models else ""
    lines = [f"## Eval `{run.suite}`: agent `{run.agent}`, {run.source}{models}", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_escape(cell) for cell in r) + " |" for r in rows]
    lines += ["", _headline(s)]
    lines += _reliability(s) + _width_note(report)
    if s.stopped_on_budget:
        lines.append(f"Stopped on budget: {s.skipped} run(s) not started.")
    return "\n".join(lines + _failed_runs(run)) + "\n"


def _headline(s: Score) -> str:
    if not s.k:
        return "**no runs**"
    interval = s.intervals.get(s.k)
    if interval is None:
        return f"**pass^{s.k} = {_pct(s.pass_hat[s.k])}**"
    return (
        f"**pass^{s.k} = {_pct(s.pass_hat[s.k])}**, {s.confidence * 100:g}% interval "
        f"{_pct(interval.low)}–{_pct(interval.high)} ({interval.method})"
    )


def _reliability(s: Score) -> list[str]:
    """Which scenarios fail every time (a bug to fix) and which are flaky (pass^k pays for them)."""
    lines = []
    if s.failing:
        lines.append(f"Fails every time: {', '.join(f'`{x}`' for x in s.failing)}.")
    flaky = [x for x in s.scenarios if x.status == "flaky"]
    if flaky:
        shown = ", ".join(f"`{x.id}` ({x.passed}/{x.runs}, flips {_pct(x.flip_rate)})" for x in flaky)
        lines.append(f"Flaky (passed and failed in this eval): {shown}.")
    return [""] + lines if lines else []


def _width_note(report: Report) -> list[str]:
    """With --target-width: whether every scenario's interval got that narrow, and which did not."""
    width = report.eval.target_width
    if width is None:
        return []
    wide = [x for x in report.score.scenarios if x.interval is not None and x.interval.width > width]
    if not wide:
        return ["", f"Runs were added until every scenario's interval was at most {width * 100:g} points wide."]
    shown = ", ".join(f"`{x.id}` ({x.interval.width * 100:.0f} points, {x.runs} runs)" for x in wide if x.interval)
    why = "the budget was spent" if report.score.stopped_on_budget else "--max-runs was reached"
    return ["", f"Target width {width * 100:g} points not reached ({why}): {shown}."]


def _scenario_row(x: ScenarioScore, ks: list[int]) -> list[str]:
    failing = "; ".join(f"{label} ×{n}" for label, n in sorted(x.check_failures.items())) or "-"
    if x.errors:
        failing = f"errors ×{x.errors}; {failing}" if failing != "-" else f"errors ×{x.errors}"
    hats = [_pct(x.pass_hat[k]) + (_range(x.interval) if k == 1 else "") if k in x.pass_hat else "" for k in ks]
    return [
        x.id,
        str(x.runs),
        f"{x.passed}/{x.runs}",
        *hats,
        _pct(x.flip_rate) if x.status == "flaky" else "-",
        failing,
        str(x.input_tokens + x.output_tokens),
        f"${x.cost:.4f}",
        f"{x.seconds:.1f}s",
        f"{x.mean_steps:.1f}",
        f"{x.mean_turns:.1f}",
    ]


def _failed_runs(run: EvalRun) -> list[str]:
    """Each failed run: why, and the command that replays it offline."""
    failed = sorted((r for r in run.runs if not r.passed), key=lambda r: (r.scenario, r.index))
    lines = ["", "### Failed runs", ""] if failed else []
    for r in failed:
        lines.append(f"- `{r.scenario}` run {r.index} (thread `{r.thread_id}`, ended {r.reason or 'with an error'}):")
        if r.error:
            lines.append(f"  - error: {r.error}")
        lines += [f"  - ✗ {c.label}: {c.reason}" for c in r.checks if not c.passed]
        lines.append(f"  - replay offline: `{replay_command(r)}`")
    return lines


def junit_xml(report: Report) -> str:
    """One testcase per run (name `scenario[run i]`), failed checks as its failure message."""
    runs = report.eval.runs
    suite = ET.Element(
        "testsuite",
        name=f"eval:{report.eval.suite}",
        tests=str(len(runs) + report.eval.skipped),
        failures=str(sum(not r.passed for r in runs)),
        skipped=str(report.eval.skipped),
        time=f"{report.eval.seconds:.3f}",
    )
    _junit_properties(suite, report.score)
    for r in sorted(runs, key=lambda r: (r.scenario, r.index)):
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"eval.{report.eval.agent}.{r.scenario}",
            name=f"{r.scenario}[run {r.index}]",
            time=f"{r.seconds:.3f}",
        )
        if not r.passed:
            failed = [f"{c.label}: {c.reason}" for c in r.checks if not c.passed]
            message = r.error or failed[0]
            failure = ET.SubElement(case, "failure", message=message[:500], type="EvalCheckFailed")
            failure.text = "\n".join([*([r.error] if r.error else []), *failed, f"replay: {replay_command(r)}"])
    if report.eval.stopped_on_budget:
        case = ET.SubElement(suite, "testcase", classname=f"eval.{report.eval.agent}", name="budget")
        ET.SubElement(case, "skipped", message=f"{report.eval.skipped} run(s) not started: budget spent")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _junit_properties(suite: ET.Element, s: Score) -> None:
    """The suite's rates and intervals as JUnit properties (CI dashboards show them next to the runs)."""
    properties = ET.SubElement(suite, "properties")

    def put(name: str, value: str) -> None:
        ET.SubElement(properties, "property", name=name, value=value)

    put("confidence", f"{s.confidence:g}")
    for k, interval in sorted(s.intervals.items()):
        put(f"pass^{k}", f"{s.pass_hat[k]:.4f}")
        put(f"pass^{k}.low", f"{interval.low:.4f}")
        put(f"pass^{k}.high", f"{interval.high:.4f}")
    put("flaky", ",".join(s.flaky))
    put("fails_every_time", ",".join(s.failing))


def write_json(report: Report, path: str | Path) -> None:
    text = json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False)
    Path(path).write_text(text + "\n", encoding="utf-8")
