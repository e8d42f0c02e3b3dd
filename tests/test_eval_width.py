"""`--target-width`: runs are added until each scenario's pass-rate interval is that narrow, within
`--max-runs` and the budget (scripted models, real threads)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.eval import Evaluator, ScriptedSource, build_report, load_suite
from orchestrator.eval.report import markdown
from orchestrator.eval.sources import ScenarioScript
from orchestrator.eval.stats import wilson
from providers.offline import CallSpec, ResponseSpec

ROOT = Path(__file__).resolve().parent.parent

SHIP = ScenarioScript(
    a=[
        ResponseSpec(text="Hello, how can I help?"),
        ResponseSpec(tool_calls=[CallSpec(name="process_order", arguments={"order_id": "A1002", "action": "ship"})]),
        ResponseSpec(text="Your order A1002 has shipped."),
    ],
    b=[
        ResponseSpec(text="Please ship A1002."),
        ResponseSpec(text="Thanks!", tool_calls=[CallSpec(name="end_chat", arguments={"reason": "done"})]),
    ],
)
REFUSE = ScenarioScript(
    a=[ResponseSpec(text="Hello, how can I help?"), ResponseSpec(text="I cannot do that.")],
    b=[
        ResponseSpec(text="Please ship A1002."),
        ResponseSpec(text="Bye.", tool_calls=[CallSpec(name="end_chat", arguments={"reason": "refused"})]),
    ],
)


def _suite(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(f"""\
agent: support_demo
definitions: {ROOT / "agents"}
config: {ROOT / "configs" / "default.yaml"}
cassettes: cas
defaults:
  models: {{a: demo, b: demo}}
  prompts: {{b: simulated_customer}}
  k: 1
  concurrency: 8
  {extra}
scenarios:
  - id: steady
    arguments: {{persona: Kwame, goal: ship A1002}}
    checks: [{{values: {{"order_status:A1002": shipped}}}}]
  - id: flaky
    arguments: {{persona: Ana, goal: ship A1002}}
    checks: [{{values: {{"order_status:A1002": shipped}}}}]
""")
    return path


def _script(scenario: str, index: int) -> ScenarioScript:
    return SHIP if scenario == "steady" or index % 2 else REFUSE


async def test_runs_are_added_until_the_interval_is_narrow_enough(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path))
    evaluator = Evaluator(suite, ScriptedSource(_script), storage=":memory:")
    result = await evaluator.run(target_width=0.3, most_runs=10)
    by = {sid: sorted(r.index for r in result.runs if r.scenario == sid) for sid in ("steady", "flaky")}
    # all passing: n / (n + 1.96²) >= 0.7 needs 9 runs; grown 1 -> 2 -> 4 -> 8 -> 9 (at most doubling)
    assert by["steady"] == list(range(1, 10))
    assert wilson(9, 9).width <= 0.3 < wilson(8, 8).width
    assert by["flaky"] == list(range(1, 11))  # half pass: ~40 runs needed, --max-runs 10 stops it
    assert result.k == {"steady": 9, "flaky": 10} and result.target_width == 0.3
    text = markdown(build_report(result))
    assert "Target width 30 points not reached (--max-runs was reached): `flaky` (" in text
    assert "pass^6" not in text and "| pass^5 | pass^9 |" in text  # columns: 1..5 and the suite's k


async def test_the_budget_stops_the_added_runs(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, "budget: {tokens: 200}"))
    result = await Evaluator(suite, ScriptedSource(_script), storage=":memory:").run(target_width=0.3)
    assert result.stopped_on_budget and result.skipped > 0 and len(result.runs) < 9
    assert "not reached (the budget was spent)" in markdown(build_report(result))


def test_target_width_needs_runs_that_can_be_added(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["eval", str(_suite(tmp_path)), "--target-width", "0.1"])
    assert out.exit_code == 2 and "--target-width adds runs: it needs --live or --scripted" in out.output
