"""The tau2-bench retail example suite (evals/tau2_retail/, MIT, credited in its NOTICE.md) runs offline
from its recorded cassettes and gives the numbers docs/evals.md shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.eval import run_suite
from orchestrator.eval.report import markdown

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "evals" / "tau2_retail" / "retail.yaml"


async def test_the_retail_suite_replays_with_its_documented_numbers() -> None:
    report = await run_suite(SUITE)
    assert all(r.error is None for r in report.eval.runs), [r.error for r in report.eval.runs]
    s = report.score
    by = {x.id: x for x in s.scenarios}
    assert {k: (x.passed, x.runs, x.simulator_faults) for k, x in by.items()} == {
        "task_66": (3, 4, 0),
        "task_69": (3, 3, 1),  # run 4: the simulated user recited its instructions
        "task_88": (0, 4, 0),  # the agent never asks for the reason, so it records the wrong one
    }
    assert s.k == 3 and s.simulator_faults == 1
    assert s.pass_hat[1] == pytest.approx((3 / 4 + 1 + 0) / 3)
    assert s.pass_hat[3] == pytest.approx((1 / 4 + 1 + 0) / 3)
    assert s.flaky == ["task_66"] and s.failing == ["task_88"]
    assert sorted({r.seed for r in report.eval.runs}) == [2025, 2026, 2027, 2028]
    text = markdown(report)
    assert "| **overall** | 11 | 6/11 | 58% [31–81%] | 50% [0–100%] | 42% [0–100%] |" in text
    assert "- `task_69` run 4: simulator check: fail: The user recited its instructions" in text


def test_the_example_credits_tau2_bench() -> None:
    notice = (SUITE.parent / "NOTICE.md").read_text()
    assert "MIT License" in notice and "Copyright (c) 2025 Sierra Research" in notice
    assert "tau2-bench" in SUITE.read_text()
