"""The `simulator` check: a judge with the default rubric (or one's own) flags runs where the simulated
user broke its instructions; such runs are reported apart and left out of the agent's rates."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from orchestrator.eval import Evaluator, ScriptedSource, build_report, load_suite
from orchestrator.eval.grading import simulator_system
from orchestrator.eval.report import junit_xml, markdown
from orchestrator.eval.sources import ScenarioScript
from orchestrator.eval.suite import SimulatorCheck, SuiteError
from providers.offline import CallSpec, ResponseSpec

ROOT = Path(__file__).resolve().parent.parent


def _script(simulator_ok: bool, agent_ok: bool) -> ScenarioScript:
    action = "ship" if agent_ok else "cancel"
    verdict = "pass" if simulator_ok else "fail"
    return ScenarioScript(
        a=[
            ResponseSpec(text="Hello, how can I help?"),
            ResponseSpec(
                tool_calls=[CallSpec(name="process_order", arguments={"order_id": "A1002", "action": action})]
            ),
            ResponseSpec(text="Done."),
        ],
        b=[
            ResponseSpec(
                text="Please ship A1002." if simulator_ok else "My goal is: get A1002 shipped. I was told to."
            ),
            ResponseSpec(text="Thanks!", tool_calls=[CallSpec(name="end_chat", arguments={"reason": "done"})]),
        ],
        judge=[ResponseSpec(text=f'{{"verdict": "{verdict}", "reason": "side b {verdict}ed its brief"}}')],
    )


PLAN = {1: _script(True, True), 2: _script(False, True), 3: _script(True, False), 4: _script(False, False)}


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(f"""\
agent: support_demo
definitions: {ROOT / "agents"}
config: {ROOT / "configs" / "default.yaml"}
cassettes: cas
defaults:
  models: {{a: demo, b: demo}}
  prompts: {{b: simulated_customer}}
  judge_model: demo
  k: 4
scenarios:
  - id: ship
    arguments: {{persona: Kwame, goal: get A1002 shipped}}
    checks:
      - values: {{"order_status:A1002": shipped}}
      - simulator: default
""")
    return path


async def test_simulator_faults_are_left_out_of_the_agents_rates(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path))
    result = await Evaluator(suite, ScriptedSource(lambda s, i: PLAN[i]), storage=":memory:").run()
    by = {r.index: r for r in result.runs}
    assert [(by[i].passed, by[i].simulator_fault) for i in (1, 2, 3, 4)] == [
        (True, False),
        (True, True),  # the agent did its part; the run is still left out
        (False, False),
        (False, True),
    ]
    fault = next(c for c in by[2].checks if c.kind == "simulator")
    assert (
        fault.label == "simulator (default rubric)" and fault.reason == "simulator check: fail: side b failed its brief"
    )

    report = build_report(result)
    s = report.score
    assert (s.runs, s.passed, s.simulator_faults) == (2, 1, 2) and s.pass_hat[1] == 0.5
    assert s.scenarios[0].simulator_faults == 2 and s.scenarios[0].runs == 2
    text = markdown(report)
    assert "Simulator faults: 2 run(s) left out of the rates above (listed below)." in text
    assert "### Simulator faults: 2 run(s) left out of the agent's rates" in text
    assert "- `ship` run 2: simulator check: fail: side b failed its brief" in text
    assert "`ship` run 3 (thread" in text and "`ship` run 4 (thread" not in text  # failed runs: the agent's only
    root = ET.fromstring(junit_xml(report))
    assert (root.get("failures"), root.get("skipped")) == ("1", "2")
    skipped = [c.get("name") for c in root.iter("testcase") if c.find("skipped") is not None]
    assert skipped == ["ship[run 2]", "ship[run 4]"]


def test_the_default_rubric_carries_the_scenarios_instructions(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path))
    (check,) = [c for c in suite.scenarios[0].checks if isinstance(c, SimulatorCheck)]
    system = simulator_system(check, suite.scenarios[0])
    assert "- persona: Kwame\n- goal: get A1002 shipped" in system
    assert "revealed them or its goal" in system and "answered or acted in the agent's place" in system
    assert system.endswith('"reason": "one sentence"}.')
    own = simulator_system(SimulatorCheck(simulator="Fail if side b swore."), suite.scenarios[0])
    assert own.startswith("Fail if side b swore.") and "Kwame" not in own


def test_an_empty_simulator_check_names_the_field(tmp_path: Path) -> None:
    path = _suite(tmp_path)
    path.write_text(path.read_text().replace("simulator: default", 'simulator: ""'))
    with pytest.raises(SuiteError, match=r"line \d+: scenarios.0.checks.1.simulator: String should have at least 1"):
        load_suite(path)
