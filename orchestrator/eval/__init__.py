"""Evaluating an agent against simulated users: suites, runs, pass^k, reports.

See docs/evals.md. The command is `orchestrator eval`; in Python, `Evaluator`
runs a suite and `assert_suite` fails a test under a threshold. Names are
imported on first use, so `orchestrator --help` (which registers the command)
stays free of httpx and LiteLLM.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.eval.report import Report, build_report
    from orchestrator.eval.runner import EvalRun, Evaluator, RunOutcome
    from orchestrator.eval.scoring import Score, pass_hat_k, score
    from orchestrator.eval.sources import LiveSource, ReplaySource, ScriptedSource, load_script
    from orchestrator.eval.suite import Suite, SuiteError, load_suite
    from orchestrator.eval.testing import assert_suite, run_suite

_HOMES = {
    "Report": "report",
    "build_report": "report",
    "EvalRun": "runner",
    "Evaluator": "runner",
    "RunOutcome": "runner",
    "Score": "scoring",
    "pass_hat_k": "scoring",
    "score": "scoring",
    "LiveSource": "sources",
    "ReplaySource": "sources",
    "ScriptedSource": "sources",
    "load_script": "sources",
    "Suite": "suite",
    "SuiteError": "suite",
    "load_suite": "suite",
    "assert_suite": "testing",
    "run_suite": "testing",
}

__all__ = [
    "EvalRun",
    "Evaluator",
    "LiveSource",
    "ReplaySource",
    "Report",
    "RunOutcome",
    "Score",
    "ScriptedSource",
    "Suite",
    "SuiteError",
    "assert_suite",
    "build_report",
    "load_script",
    "load_suite",
    "pass_hat_k",
    "run_suite",
    "score",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'orchestrator.eval' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
