"""pass^k arithmetic (tau-bench: C(c, k) / C(n, k), averaged over scenarios), reports and compare."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from math import isclose

import pytest

from orchestrator.eval.compare import compare, compare_markdown
from orchestrator.eval.grading import CheckOutcome
from orchestrator.eval.report import (
    build_report,
    junit_xml,
    load_report,
    markdown,
    write_json,
)
from orchestrator.eval.runner import EvalRun, RunOutcome
from orchestrator.eval.scoring import pass_hat_k, score


def test_pass_hat_k_is_the_share_of_k_subsets_that_all_passed() -> None:
    assert pass_hat_k(3, 2, 1) == pytest.approx(2 / 3)  # the pass rate
    assert pass_hat_k(3, 2, 2) == pytest.approx(1 / 3)  # {1,2},{1,3},{2,3}: one of three all pass
    assert pass_hat_k(3, 2, 3) == 0.0  # all three runs must pass
    assert pass_hat_k(5, 3, 2) == pytest.approx(3 / 10)  # C(3,2)/C(5,2)
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(4, 0, 1) == 0.0
    for bad in [(3, 4, 1), (3, 2, 0), (3, 2, 4), (0, 0, 1)]:
        with pytest.raises(ValueError, match="pass\\^k needs"):
            pass_hat_k(*bad)


def _run(scenario: str, index: int, passed: bool, *, tokens: int = 15, label: str = "values: x") -> RunOutcome:
    checks = [
        CheckOutcome(
            index=0, kind="values", label=label, passed=passed, reason="ok" if passed else "x: expected 1, got 2"
        )
    ]
    return RunOutcome(
        scenario=scenario,
        index=index,
        passed=passed,
        checks=checks,
        thread_id=f"thr_{scenario}_{index}",
        cassette=f"c/{scenario}/run-{index}.json",
        reason="end_conversation",
        steps=4,
        turns=3,
        input_tokens=tokens - 5,
        output_tokens=5,
        cost=0.001,
        seconds=0.5,
    )


def _eval(outcomes: dict[str, list[bool]], *, skipped: int = 0) -> EvalRun:
    runs = [_run(sid, i + 1, ok) for sid, oks in outcomes.items() for i, ok in enumerate(oks)]
    return EvalRun(
        suite="s.yaml",
        agent="ag",
        source="replay",
        models={"a": "demo"},
        k={sid: len(oks) for sid, oks in outcomes.items()},
        runs=runs,
        skipped=skipped,
        stopped_on_budget=bool(skipped),
        seconds=1.5,
    )


def test_suite_pass_hat_k_is_the_mean_over_scenarios() -> None:
    s = score(_eval({"always": [True] * 3, "flaky": [True, False, True], "never": [False] * 3}))
    assert s.k == 3 and s.runs == 9 and s.passed == 5
    assert isclose(s.pass_hat[1], (1 + 2 / 3 + 0) / 3)
    assert isclose(s.pass_hat[2], (1 + 1 / 3 + 0) / 3)
    assert isclose(s.pass_hat[3], (1 + 0 + 0) / 3)
    flaky = next(x for x in s.scenarios if x.id == "flaky")
    assert (flaky.passed, flaky.all_passed, flaky.check_failures) == (2, False, {"values: x": 1})
    assert (flaky.input_tokens, flaky.output_tokens, flaky.mean_steps, flaky.mean_turns) == (30, 15, 4, 3)


def test_suite_k_is_the_fewest_runs_any_scenario_has() -> None:
    s = score(_eval({"three": [True, True, False], "two": [True, True]}))
    assert s.k == 2 and set(s.pass_hat) == {1, 2}
    assert isclose(s.pass_hat[2], (1 / 3 + 1) / 2)


def test_markdown_json_and_junit_reports(tmp_path) -> None:
    report = build_report(_eval({"ok": [True, True], "bad": [True, False]}, skipped=2))
    text = markdown(report)
    assert "| ok | 2 | 2/2 | 100% [34–100%] | 100% | - |" in text  # Wilson: 2/(2 + 1.96²) = 0.34
    assert "| bad | 2 | 1/2 | 50% [9–91%] | 0% | 50% |" in text  # flaky: one run of two flips
    assert "**pass^2 = 50%**, 95% interval" in text and "Stopped on budget: 2 run(s) not started." in text
    assert "`bad` run 2" in text and "x: expected 1, got 2" in text
    assert "replay offline: `orchestrator eval replay c/bad/run-2.json`" in text

    write_json(report, tmp_path / "r.json")
    again = load_report(tmp_path / "r.json")
    assert again == report and again.score.pass_hat == {1: 0.75, 2: 0.5}

    root = ET.fromstring(junit_xml(report))
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("6", "1", "2")
    failed = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["bad[run 2]"]
    assert "replay: orchestrator eval replay c/bad/run-2.json" in failed[0].find("failure").text


def test_a_pipe_in_a_check_label_does_not_split_the_table() -> None:
    result = _eval({"one": [False]})
    result.runs[0].checks[0].label = "text (a): matches /(can't|cannot)/"
    row = next(line for line in markdown(build_report(result)).splitlines() if line.startswith("| one |"))
    assert "matches /(can't\\|cannot)/ ×1" in row
    assert len(re.split(r"(?<!\\)\|", row)) == 13  # eleven cells between the outer pipes


def test_load_report_names_the_file_when_it_is_not_a_report(tmp_path) -> None:
    (tmp_path / "x.json").write_text('{"runs": []}')
    with pytest.raises(ValueError, match="x.json: not an eval report"):
        load_report(tmp_path / "x.json")


def test_compare_scenario_by_scenario() -> None:
    before = build_report(
        _eval({"fixed": [False, False], "broke": [True, True], "same": [True, False], "gone": [True]})
    )
    after = build_report(_eval({"fixed": [True, True], "broke": [True, False], "same": [False, True], "new": [True]}))
    changes = {c.scenario: c for c in compare(before, after)}
    assert {k: c.verdict for k, c in changes.items()} == {
        "fixed": "better",
        "broke": "worse",
        "same": "same",
        "gone": "removed",
        "new": "added",
    }
    assert changes["fixed"].checks_now_passing == ["values: x"] and changes["broke"].checks_now_failing == ["values: x"]
    text = compare_markdown(before, after, ("a.json", "b.json"))
    assert "| fixed | 0/2 (pass^2 0%) | 2/2 (pass^2 100%) | ▲ better |" in text
    assert "| broke | 2/2 (pass^2 100%) | 1/2 (pass^2 0%) | ▼ worse | values: x |" in text
    assert "1 scenario(s) better, 1 worse." in text
