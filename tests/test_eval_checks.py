"""The checks evals added to orchestrator.testing.checks (text, predicate) and the budget rule, on their own."""

from __future__ import annotations

import pytest

from orchestrator.eval.grading import parse_verdict
from orchestrator.eval.suite import Budget
from orchestrator.testing.checks import check_text

TEXTS = ["Hello, how can I help?", "Order A1002 has SHIPPED."]


def test_text_contains_regex_and_absent() -> None:
    assert check_text(TEXTS, contains="shipped")  # case-insensitive
    assert check_text(TEXTS, regex=r"A\d{4}")
    missing = check_text(TEXTS, contains="refund")
    assert (
        not missing
        and missing.reason == "expected a text that contains 'refund'; the last one: 'Order A1002 has SHIPPED.'"
    )
    assert check_text(TEXTS, regex="cancel", absent=True)
    said = check_text(TEXTS, regex="ship+ed", absent=True)
    assert not said and "found: 'Order A1002 has SHIPPED.'" in said.reason
    assert not check_text([], contains="x") and "no text at all" in check_text([], contains="x").reason
    with pytest.raises(ValueError, match="exactly one of contains= or regex="):
        check_text(TEXTS, contains="a", regex="b")


def test_contains_is_literal_not_a_pattern() -> None:
    assert not check_text(["total 5"], contains="5.0") and check_text(["costs 5.0"], contains="5.0")
    assert not check_text(["a+b"], contains="a.b")


def test_budget_in_tokens_or_cost() -> None:
    assert not Budget(tokens=100).exceeded(99, 5.0) and Budget(tokens=100).exceeded(100, 0)
    assert not Budget(cost=0.5).exceeded(10**9, 0.49) and Budget(cost=0.5).exceeded(0, 0.5)
    assert Budget(tokens=100, cost=0.5).exceeded(0, 0.6)


def test_the_judge_answer_must_be_the_json_asked_for() -> None:
    assert parse_verdict('{"verdict": "PASS", "reason": "fine"}').passed
    assert not parse_verdict('{"verdict": "fail", "reason": "rude"}').passed
    for answer in ["pass", '{"verdict": "maybe"}', '{"verdict": "pass"', "[1, 2]", ""]:
        result = parse_verdict(answer)
        assert not result.passed and "did not answer with the JSON asked for" in result.reason
