"""`orchestrator eval compare` on the bundled pairs of recorded suites (evals/compare/, one prompt changed):
a known-better pair gets "better", a reworded prompt "not distinguishable", and `--fail-if` sets the exit code."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.eval.compare import compare_markdown, differences
from orchestrator.eval.report import Report, write_json
from orchestrator.eval.testing import run_suite

ROOT = Path(__file__).resolve().parent.parent
SUITES = ROOT / "evals" / "compare"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three suites replayed once from their cassettes (offline), each report written as JSON."""
    folder = tmp_path_factory.mktemp("compare")
    paths = {}
    for name in ("before", "handover", "reworded"):
        report: Report = asyncio.run(run_suite(SUITES / f"{name}.yaml"))
        assert all(r.error is None for r in report.eval.runs), [r.error for r in report.eval.runs]
        paths[name] = folder / f"{name}.json"
        write_json(report, paths[name])
    return paths


def _load(path: Path) -> Report:
    from orchestrator.eval.report import load_report

    return load_report(path)


def test_the_known_better_pair_is_better(reports: dict[str, Path]) -> None:
    before, after = _load(reports["before"]), _load(reports["handover"])
    found = differences(before, after)
    assert [(d.k, d.verdict) for d in found] == [(1, "better"), (3, "better")]
    pass1 = found[0]
    assert (pass1.a, pass1.b) == (pytest.approx(7 / 12), 1.0)
    # stratified permutation: changes_mind 0/3 -> 3/3 (0.05 each way) and angry 1/3 -> 3/3 (0.2 each way)
    assert pass1.p_value == pytest.approx(2 * 0.05 * 0.2, abs=0.01)
    assert pass1.difference.estimate == pytest.approx(5 / 12) and pass1.difference.high > 0.4
    text = compare_markdown(before, after, ("before.json", "handover.json"))
    assert "| pass^1 | 58% | 100% | +42 points [" in text and "| **better** |" in text


def test_the_reworded_prompt_is_not_distinguishable(reports: dict[str, Path]) -> None:
    before, after = _load(reports["before"]), _load(reports["reworded"])
    found = differences(before, after)
    assert [(d.k, d.verdict) for d in found] == [(1, "not distinguishable"), (3, "not distinguishable")]
    pass1 = found[0]
    assert pass1.difference.estimate == pytest.approx(1 / 12) and pass1.difference.low < 0 < pass1.difference.high
    assert pass1.p_value > 0.5 and pass1.runs_needed is not None and pass1.runs_needed > 3
    assert found[1].runs_needed is None  # pass^3 did not move: nothing to tell apart
    text = compare_markdown(before, after, ("before.json", "reworded.json"))
    assert "**not distinguishable at k=3**" in text
    assert "would need about" not in text  # said of the last rate, pass^3, which did not move
    assert "| pass^3 | 50% | 50% | +0 points" in text


def test_fail_if_sets_the_exit_code(reports: dict[str, Path]) -> None:
    def run(first: str, second: str, *options: str) -> int:
        result = CliRunner().invoke(main, ["eval", "compare", str(reports[first]), str(reports[second]), *options])
        assert "Is the difference real?" in result.output, result.output
        return result.exit_code

    assert run("before", "handover", "--fail-if", "worse") == 0
    assert run("handover", "before", "--fail-if", "worse") == 1
    assert run("before", "reworded", "--fail-if", "worse") == 0  # not shown to be worse
    assert run("before", "reworded", "--fail-if", "not-better") == 1
    assert run("before", "handover", "--fail-if", "not-better") == 0
    assert run("handover", "before") == 0  # no --fail-if: only the report
    assert run("before", "handover", "--confidence", "0.999") == 0


def test_reports_sharing_no_scenario_have_nothing_to_test(reports: dict[str, Path]) -> None:
    before = _load(reports["before"])
    other = before.model_copy(deep=True)
    for s in other.score.scenarios:
        s.id = "other_" + s.id
    assert differences(before, other) == []
    assert "No scenario is in both reports: nothing to test." in compare_markdown(before, other)
