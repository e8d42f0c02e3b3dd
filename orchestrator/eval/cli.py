"""`orchestrator eval`: run a suite, replay one of its runs, compare two reports.

`orchestrator eval SUITE` is short for `orchestrator eval run SUITE`. With no
`--live` or `--scripted`, runs replay their recorded cassettes: offline, no key.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from orchestrator.eval.report import Report
    from orchestrator.eval.runner import RunOutcome
    from orchestrator.eval.sources import ModelSource
    from orchestrator.eval.suite import Suite

__all__ = ["eval_group"]


class _DefaultRun(click.Group):
    """A first argument that is not a subcommand is a suite: `eval x.yaml` = `eval run x.yaml`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("eval", cls=_DefaultRun, context_settings={"help_option_names": ["-h", "--help"]})
def eval_group() -> None:
    """Evaluate an agent against simulated users: pass^k over repeated runs (see docs/evals.md)."""


@eval_group.command("run")
@click.argument("suite_path", metavar="SUITE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--scenario", "only", multiple=True, help="Run only this scenario id; repeat for several.")
@click.option("-k", "k", type=click.IntRange(1, 100), help="Runs per scenario (default: the suite's).")
@click.option("--concurrency", type=click.IntRange(1, 64), help="Runs at once (default: the suite's).")
@click.option("--live", is_flag=True, help="Call the configured models (keys from the environment); record each run.")
@click.option(
    "--scripted",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Answer from this script of turns (offline); record each run.",
)
@click.option(
    "--cassettes",
    type=click.Path(file_okay=False, path_type=Path),
    help="Cassette folder (default: the suite's, cassettes/evals/SUITE).",
)
@click.option("--db", help="Storage URL or SQLite path for the runs' threads (default: the config's).")
@click.option(
    "--out",
    default="eval-results",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for SUITE.json and SUITE.junit.xml.",
)
@click.option("--fail-under", type=click.FloatRange(0, 1), help="Exit 1 when the suite's pass^k is below this.")
@click.option(
    "--confidence",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.95,
    show_default=True,
    help="Confidence of the intervals shown around every rate.",
)
@click.option(
    "--target-width",
    type=click.FloatRange(0, 1, min_open=True),
    help="Add runs (live or scripted) until every scenario's pass-rate interval is at most this wide, e.g. 0.1.",
)
@click.option(
    "--max-runs",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="With --target-width: the most runs of one scenario.",
)
def run_command(
    suite_path: Path,
    only: tuple[str, ...],
    k: int | None,
    concurrency: int | None,
    live: bool,
    scripted: Path | None,
    cassettes: Path | None,
    db: str | None,
    out: Path,
    fail_under: float | None,
    confidence: float,
    target_width: float | None,
    max_runs: int,
) -> None:
    """Run every scenario of SUITE k times, print the pass^k table, write JSON and JUnit reports."""
    from orchestrator.eval.report import build_report, junit_xml, markdown, write_json
    from orchestrator.eval.runner import Evaluator
    from orchestrator.eval.suite import SuiteError, load_suite

    if live and scripted:
        raise click.UsageError("--live and --scripted are exclusive")
    if target_width is not None and not (live or scripted):
        raise click.UsageError("--target-width adds runs: it needs --live or --scripted (a replay has its recordings)")
    try:
        suite = load_suite(suite_path).with_runs(k, concurrency)
        source = _source(suite, live, scripted, cassettes)
        evaluator = Evaluator(suite, source, storage=db, cassettes=cassettes)
    except (SuiteError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    planned = sum(suite.k_for(s) for s in suite.scenarios if not only or s.id in only)
    with _Progress(planned) as progress:
        evaluator.on_run = progress.advance
        try:
            result = asyncio.run(
                evaluator.run(only, target_width=target_width, most_runs=max_runs, confidence=confidence)
            )
        except Exception as exc:  # a setup problem (storage, a missing cassette): one line, not a traceback
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    report = build_report(result, confidence)
    _show(markdown(report))
    out.mkdir(parents=True, exist_ok=True)
    write_json(report, out / f"{suite.name}.json")
    (out / f"{suite.name}.junit.xml").write_text(junit_xml(report), encoding="utf-8")
    click.echo(f"reports: {out / (suite.name + '.json')}, {out / (suite.name + '.junit.xml')}", err=True)
    _exit_code(report, fail_under)


def _source(suite: Suite, live: bool, scripted: Path | None, cassettes: Path | None) -> ModelSource:
    from orchestrator.eval.sources import LiveSource, ReplaySource, ScriptedSource, load_script

    if live:
        return LiveSource()
    if scripted:
        return ScriptedSource(load_script(scripted))
    folder = cassettes or suite.cassette_dir()
    if not folder.is_dir():
        raise ValueError(f"no cassettes in {folder}: record the suite first with --scripted FILE or --live")
    return ReplaySource(folder)


def _exit_code(report: Report, fail_under: float | None) -> None:
    score = report.score
    if fail_under is not None and (not score.k or score.pass_hat[score.k] < fail_under):
        got = score.pass_hat[score.k] if score.k else 0.0
        raise click.ClickException(f"pass^{score.k} = {got:.2f} is below --fail-under {fail_under:.2f}")


def _show(text: str) -> None:
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(text))
    else:
        click.echo(text)


class _Progress:
    """Runs done, passing, tokens and cost so far, on stderr (stdout keeps the report)."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = (
            TextColumn("eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
        )
        self._progress = Progress(*columns, console=Console(stderr=True), transient=True)
        self._task = self._progress.add_task("", total=total)
        self._passed = self._done = self._tokens = 0
        self._cost = 0.0

    def advance(self, run: RunOutcome) -> None:
        self._done += 1
        if self._done > (self._progress.tasks[0].total or 0):  # --target-width added runs
            self._progress.update(self._task, total=self._done)
        self._passed += run.passed
        self._tokens += run.input_tokens + run.output_tokens
        self._cost += run.cost
        description = f"passing {self._passed}/{self._done}, {self._tokens} tokens, ${self._cost:.4f}"
        self._progress.update(self._task, advance=1, description=description)
        if not run.passed:
            self._progress.console.print(
                f"✗ {run.scenario} run {run.index}: replay with orchestrator eval replay {run.cassette}"
            )

    def __enter__(self) -> _Progress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()


@eval_group.command("replay")
@click.argument("cassette", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--suite",
    "suite_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The suite (default: the one named in the cassette).",
)
@click.option("--db", help="Storage for the replayed thread (default: a throwaway in-memory database).")
def replay_command(cassette: Path, suite_path: Path | None, db: str | None) -> None:
    """Run one recorded eval run again offline: its transcript, checks, and whether it matches the recording.

    Exits 2 if the replay differs from the recording, 1 if a check fails, 0 if it passes."""
    from orchestrator.cli.session import compare
    from orchestrator.eval.grading import render_transcript
    from orchestrator.eval.runner import Evaluator
    from orchestrator.eval.sources import ReplaySource
    from orchestrator.eval.suite import SuiteError, load_suite
    from providers.cassette import load_cassette

    try:
        meta = load_cassette(cassette).metadata
        info = meta.get("eval") or {}
        if not info.get("scenario"):
            raise ValueError(f"{cassette}: not an eval cassette (no 'eval' in its metadata)")
        suite = load_suite(suite_path or info["suite"])
        evaluator = Evaluator(suite, ReplaySource(cassette.parent, file=cassette), storage=db or ":memory:")
        outcome, got = asyncio.run(evaluator.run_single(info["scenario"], int(info.get("run", 1))))
    except (SuiteError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(render_transcript(got))
    click.echo("")
    for check in outcome.checks:
        click.echo(f"{'✓' if check.passed else '✗'} {check.label}: {check.reason}")
    # an error the recording also ended with is reproduced, not a difference
    new_error = outcome.error if outcome.error and outcome.error != meta.get("error") else None
    problems = ([new_error] if new_error else []) + compare(meta.get("transcript", []), got)
    if problems:
        click.echo("\n".join(problems), err=True)
        click.echo(f"{cassette}: the replay differs from the recording", err=True)
        raise SystemExit(2)
    click.echo(
        f"{cassette}: replay matches the recording ({len(got)} messages); {'passed' if outcome.passed else 'failed'}"
    )
    if not outcome.passed:
        raise SystemExit(1)


@eval_group.command("compare")
@click.argument("first", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("second", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--confidence",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.95,
    show_default=True,
    help="Confidence of the test and the interval of the difference.",
)
@click.option(
    "--fail-if",
    "fail_if",
    type=click.Choice(["worse", "not-better"]),
    help="Exit 1 when SECOND is worse than FIRST (or not better) at pass^1 or pass^k, beyond chance.",
)
def compare_command(first: Path, second: Path, confidence: float, fail_if: str | None) -> None:
    """Show what changed between two eval reports (JSON), scenario by scenario, and whether it is real."""
    from orchestrator.eval.compare import compare_markdown, differences
    from orchestrator.eval.report import load_report

    try:
        a, b = load_report(first), load_report(second)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    found = differences(a, b, confidence)
    _show(compare_markdown(a, b, (first.name, second.name), confidence, found))
    verdicts = {d.verdict for d in found}
    if fail_if == "worse" and "worse" in verdicts:
        raise click.ClickException(f"{second.name} is worse than {first.name} (--fail-if worse)")
    if fail_if == "not-better" and ("better" not in verdicts or "worse" in verdicts):
        raise click.ClickException(f"{second.name} is not better than {first.name} (--fail-if not-better)")
