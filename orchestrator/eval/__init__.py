"""Evaluating an agent against simulated users: suites, runs, pass^k, reports.

See docs/evals.md. The command is `orchestrator eval`; in Python, `Evaluator`
runs a suite and `assert_suite` fails a test under a threshold.
"""

from .report import Report, build_report
from .runner import EvalRun, Evaluator, RunOutcome
from .scoring import Score, pass_hat_k, score
from .sources import LiveSource, ReplaySource, ScriptedSource, load_script
from .suite import Suite, SuiteError, load_suite
from .testing import assert_suite, run_suite

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
