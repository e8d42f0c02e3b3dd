"""Running a suite inside a test: fail it when pass^k falls under a threshold.

    async def test_support_agent_is_reliable() -> None:
        await assert_suite("evals/support_demo.yaml", threshold=0.6)   # from its cassettes, offline

The runs go to an in-memory database unless `storage` is given, so a test
leaves nothing behind; the report comes back for further assertions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.eval.report import Report, build_report, markdown
from orchestrator.eval.runner import Evaluator
from orchestrator.eval.sources import ModelSource, ReplaySource
from orchestrator.eval.stats import DEFAULT_CONFIDENCE
from orchestrator.eval.suite import load_suite

__all__ = ["assert_suite", "run_suite"]


async def run_suite(
    path: str | Path,
    *,
    source: ModelSource | None = None,
    storage: str = ":memory:",
    k: int | None = None,
    only: Sequence[str] = (),
    confidence: float = DEFAULT_CONFIDENCE,
) -> Report:
    """Run a suite (default: replaying its cassettes) and score it, intervals at `confidence`."""
    suite = load_suite(path).with_runs(k)
    evaluator = Evaluator(suite, source or ReplaySource(suite.cassette_dir()), storage=storage)
    return build_report(await evaluator.run(only), confidence)


async def assert_suite(
    path: str | Path,
    *,
    threshold: float,
    source: ModelSource | None = None,
    storage: str = ":memory:",
    k: int | None = None,
    only: Sequence[str] = (),
) -> Report:
    """Run a suite; raise AssertionError (with the Markdown report) if its pass^k is below `threshold`."""
    report = await run_suite(path, source=source, storage=storage, k=k, only=only)
    s = report.score
    got = s.pass_hat[s.k] if s.k else 0.0
    if got < threshold:
        raise AssertionError(
            f"eval {path}: pass^{s.k} = {got:.2f} is below the threshold {threshold:.2f}\n\n" + markdown(report)
        )
    return report
