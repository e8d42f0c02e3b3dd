"""Fault report: run every fault scenario of the test suite and print a markdown table.

    .venv/bin/python bench/faults.py [--crash-points N]

Columns: the fault, what the runtime did, messages lost and duplicate tool
runs (both must be 0). The scenarios are the ones tests/test_faults_provider.py,
tests/test_faults_tools.py and tests/test_crash_resume.py assert on; a scenario
whose assertions fail is reported as BROKEN with the first line of the failure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _rows(points: int) -> list[tuple[str, str, str, str]]:
    import structlog
    import test_faults_provider as provider
    import test_faults_tools as tools
    from test_crash_resume import crash_loop

    from orchestrator.core.logs import configure_logging

    configure_logging("ERROR", stream=sys.stderr)
    rows: list[tuple[str, str, str, str]] = []
    for scenario in [*provider.SCENARIOS, *tools.SCENARIOS]:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                outcome = asyncio.run(scenario(Path(tmp)))
                rows.append((outcome.fault, outcome.result, str(outcome.lost), str(outcome.duplicate_tool_runs)))
            except Exception as exc:
                known = {**provider.KNOWN_BUGS, **tools.KNOWN_BUGS}.get(scenario.__name__, "")
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:110]
                rows.append((scenario.__name__, f"BROKEN{f' ({known})' if known else ''}: {first}", "-", "-"))
    structlog.reset_defaults()
    with tempfile.TemporaryDirectory() as tmp:
        report = crash_loop(Path(tmp), points)
    result = (
        f"{report.kills} kills, {report.processes} processes, {report.threads} threads, {report.messages} messages; "
        f"transcripts identical to an uninterrupted run: {'yes' if not report.problems else 'NO'}; "
        f"tool re-runs before their result was stored: {report.tool_reruns_before_store}; "
        f"event log gaps: {len(report.event_problems)} threads"
    )
    rows.append(
        (
            f"kill -9 during dual_ai runs, then resume ({points} points)",
            result,
            str(report.lost + report.duplicated),
            str(report.duplicate_tool_runs),
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crash-points", type=int, default=int(os.environ.get("ORCHESTRATOR_CRASH_POINTS", "10")))
    args = parser.parse_args()
    rows = _rows(args.crash_points)
    print("| fault | result | messages lost | duplicate tool runs |")
    print("|---|---|---|---|")
    for fault, result, lost, dup in rows:
        print(f"| {fault} | {result.replace('|', '/')} | {lost} | {dup} |")


if __name__ == "__main__":
    main()
