"""The suite file: checked when loaded, each problem with its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.eval.sources import ScriptError, load_script
from orchestrator.eval.suite import (
    JudgeCheck,
    NoToolCallCheck,
    PredicateCheck,
    SuiteError,
    TextCheck,
    ToolCallsCheck,
    load_suite,
)

ROOT = Path(__file__).resolve().parent.parent

GOOD = """\
agent: support_demo
defaults: {k: 2}
scenarios:
  - id: one
    arguments: {goal: ship it}
    checks:
      - tool_calls: [lookup_order, {name: process_order, arguments: {action: ship}}]
        ordered: false
      - no_tool_call: end_chat
      - text: {side: a, contains: shipped}
      - judge: Pass if polite.
        model: fast
      - predicate: preds.py:ok
        keys: [x]
"""


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    (tmp_path / "preds.py").write_text("def ok(values):\n    return True\n")
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_good_suite_loads_with_each_check_kind_read_from_its_key(tmp_path: Path) -> None:
    suite = load_suite(_write(tmp_path, GOOD))
    checks = suite.scenarios[0].checks
    assert [type(c) for c in checks] == [ToolCallsCheck, NoToolCallCheck, TextCheck, JudgeCheck, PredicateCheck]
    assert checks[0].tool_calls[1].expected() == ("process_order", {"action": "ship"}) and not checks[0].ordered
    assert checks[1].no_tool_call.expected() == "end_chat"
    assert suite.k_for(suite.scenarios[0]) == 2 and suite.name == "s"
    assert suite.cassette_dir() == tmp_path / "cassettes" / "evals" / "s"
    assert suite.resolve("../agents") == tmp_path.parent / "agents"  # relative to the suite file


@pytest.mark.parametrize(
    ("change", "where", "message"),
    [
        (
            ("      - no_tool_call: end_chat", "      - no_tool_kall: end_chat"),
            "s.yaml, line 9",
            "scenarios.0.checks.1",
        ),
        (
            ("defaults: {k: 2}", "defaults: {k: 0}"),
            "s.yaml, line 2",
            "defaults.k: Input should be greater than or equal to 1",
        ),
        (
            ("      - text: {side: a, contains: shipped}", "      - text: {side: c, contains: shipped}"),
            "s.yaml, line 10",
            "scenarios.0.checks.2.side: Input should be 'a' or 'b'",
        ),
        (
            ("      - text: {side: a, contains: shipped}", "      - text: {side: a}"),
            "s.yaml, line 10",
            "needs exactly one of 'contains' or 'regex'",
        ),
        (
            ("      - predicate: preds.py:ok", "      - predicate: preds.py:missing"),
            "s.yaml, line 13",
            "has no function 'missing'",
        ),
        (
            ("      - predicate: preds.py:ok", "      - predicate: nowhere.py:ok"),
            "s.yaml, line 13",
            "no file 'nowhere.py'",
        ),
        (("  - id: one", "  - id: one two"), "s.yaml, line 4", "scenarios.0.id: String should match pattern"),
    ],
)
def test_problems_name_the_file_line_and_field(
    tmp_path: Path, change: tuple[str, str], where: str, message: str
) -> None:
    assert change[0] in GOOD
    path = _write(tmp_path, GOOD.replace(change[0], change[1]))
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    assert f"{where}: " in str(caught.value) and message in str(caught.value), str(caught.value)


def test_a_check_entry_names_exactly_one_known_kind(tmp_path: Path) -> None:
    unknown = GOOD.replace("      - no_tool_call: end_chat", "      - no_tool_kall: end_chat")
    with pytest.raises(SuiteError) as caught:
        load_suite(_write(tmp_path, unknown))
    assert "line 9: scenarios.0.checks.1: Input tag 'unknown check no_tool_kall'" in str(caught.value)
    kinds = "'values', 'predicate', 'tool_calls', 'no_tool_call', 'end_reason', 'text', 'output', 'judge'"
    assert kinds in str(caught.value)
    two = GOOD.replace("      - no_tool_call: end_chat", "      - {no_tool_call: end_chat, values: {a: 1}}")
    with pytest.raises(
        SuiteError, match="line 9: scenarios.0.checks.1: Input tag 'one check per entry, found values, no_tool_call'"
    ):
        load_suite(_write(tmp_path, two))


def test_duplicate_ids_bad_yaml_and_missing_files(tmp_path: Path) -> None:
    twice = GOOD + GOOD[GOOD.index("  - id: one") :]
    with pytest.raises(SuiteError, match="scenario id 'one' is used twice"):
        load_suite(_write(tmp_path, twice))
    with pytest.raises(SuiteError, match=r"s.yaml, line 2: invalid YAML"):
        load_suite(_write(tmp_path, "agent: x\n  bad: [\n"))
    with pytest.raises(SuiteError, match="cannot read the eval suite"):
        load_suite(tmp_path / "none.yaml")
    with_file = GOOD.replace("    arguments: {goal: ship it}", "    state: {files: {receipt.pdf: nope.pdf}}")
    with pytest.raises(SuiteError, match=r"line \d+: scenarios.0.state.files.receipt.pdf: no file 'nope.pdf'"):
        load_suite(_write(tmp_path, with_file))


def test_script_file_problems_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "x.script.yaml"
    path.write_text("scenarios:\n  one:\n    a:\n      - {txt: hi}\n")
    with pytest.raises(ScriptError, match=r"x.script.yaml, line 4: scenarios.one.a.0.txt: Extra inputs"):
        load_script(path)
    path.write_text("scenarios:\n  one:\n    variants:\n      - a: [{text: first}]\n      - a: [{text: second}]\n")
    script = load_script(path)
    assert [script("one", i).a[0].text for i in (1, 2, 3)] == ["first", "second", "first"]
    with pytest.raises(ScriptError, match="no script for scenario 'two'"):
        script("two", 1)


def test_the_example_suite_loads() -> None:
    suite = load_suite(ROOT / "evals" / "support_demo.yaml")
    assert len(suite.scenarios) >= 5 and suite.defaults.k == 3
    assert suite.cassette_dir() == ROOT / "cassettes" / "evals" / "support_demo"
