"""Eval runs end to end: real threads on scripted models (OpenAI-wire SSE through respx),
each check kind on what happened, the budget stop, cassettes and their replay, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import respx
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.eval import (
    Evaluator,
    ScriptedSource,
    assert_suite,
    build_report,
    load_suite,
)
from orchestrator.eval.report import markdown
from orchestrator.eval.sources import (
    LiveSource,
    ReplaySource,
    RunModel,
    ScenarioScript,
)
from providers.offline import CallSpec, ResponseSpec
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

ROOT = Path(__file__).resolve().parent.parent
GREET = ResponseSpec(text="Hello, how can I help?")


def _suite(tmp_path: Path, scenarios: str, defaults: str = "k: 1", config: Path | None = None) -> Path:
    (tmp_path / "preds.py").write_text(
        "def shipped(values):\n    return values['order_status:A1002'] == 'shipped', 'status is ' + str(values['order_status:A1002'])\n"  # noqa: E501
        "def cancelled(values):\n    return values['order_status:A1002'] == 'cancelled', 'status is ' + str(values['order_status:A1002'])\n"  # noqa: E501
    )
    (tmp_path / "receipt.txt").write_text("A1002 54.50")
    path = tmp_path / "suite.yaml"
    path.write_text(f"""\
agent: support_demo
definitions: {ROOT / "agents"}
config: {config or ROOT / "configs" / "default.yaml"}
cassettes: cas
defaults:
  models: {{a: demo, b: demo}}
  prompts: {{b: simulated_customer}}
  judge_model: demo
  {defaults}
scenarios:
{scenarios}""")
    return path


SHIP = ScenarioScript(
    a=[
        GREET,
        ResponseSpec(text="Checking.", tool_calls=[CallSpec(name="lookup_order", arguments={"order_id": "A1002"})]),
        ResponseSpec(tool_calls=[CallSpec(name="process_order", arguments={"order_id": "A1002", "action": "ship"})]),
        ResponseSpec(text="Your order A1002 has shipped."),
    ],
    b=[
        ResponseSpec(text="Where is my order A1002?"),
        ResponseSpec(text="Thanks!", tool_calls=[CallSpec(name="end_chat", arguments={"reason": "done"})]),
    ],
    judge=[
        ResponseSpec(text='Sure. {"verdict": "pass", "reason": "helpful and correct"}'),
        ResponseSpec(text="I think it went fine."),
    ],
)

ALL_CHECKS = """\
  - id: ship
    arguments: {persona: Kwame, goal: get A1002 shipped}
    state:
      values: {seeded: {tier: gold, n: 1}}
      files: {receipt.txt: receipt.txt}
    checks:
      - values: {"order_status:A1002": shipped}
      - values: {"order_status:A1002": cancelled}
      - values: {seeded: {tier: gold}}
        subset: true
      - predicate: preds.py:shipped
        keys: ["order_status:A1002"]
      - predicate: preds.py:cancelled
        keys: ["order_status:A1002"]
      - tool_calls:
          [{name: lookup_order, arguments: {order_id: A1002}}, {name: process_order, arguments: {action: ship}}]
      - tool_calls: [process_order, lookup_order]
      - tool_calls: [process_order, lookup_order]
        ordered: false
      - no_tool_call: {name: process_order, arguments: {action: cancel}}
      - no_tool_call: lookup_order
      - end_reason: end_conversation
        by: b
      - end_reason: max_session_turns
      - text: {side: a, contains: HAS SHIPPED}
      - text: {side: b, regex: "refund"}
      - text: {regex: "cancel", absent: true}
      - judge: Pass if the agent was helpful.
      - judge: Pass if the agent was brief.
"""


async def test_each_kind_of_check_passes_or_fails_with_its_reason(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, ALL_CHECKS))
    evaluator = Evaluator(suite, ScriptedSource(lambda scenario, index: SHIP), storage=str(tmp_path / "ev.db"))
    result = await evaluator.run()

    (run,) = result.runs
    verdicts = [(c.kind, c.passed) for c in run.checks]
    assert verdicts == [
        ("values", True),
        ("values", False),
        ("values", True),
        ("predicate", True),
        ("predicate", False),
        ("tool_calls", True),
        ("tool_calls", False),
        ("tool_calls", True),
        ("no_tool_call", True),
        ("no_tool_call", False),
        ("end_reason", True),
        ("end_reason", False),
        ("text", True),
        ("text", False),
        ("text", True),
        ("judge", True),
        ("judge", False),
    ]
    reasons = [c.reason for c in run.checks]
    assert reasons[1] == 'order_status:A1002: expected "cancelled", got "shipped"'
    assert "cancelled failed: status is shipped" in reasons[4]
    assert "expected a call lookup_order in order" in reasons[6]
    assert 'lookup_order must not be called; made: lookup_order({"order_id": "A1002"})' in reasons[9]
    assert "it ended with end_conversation (stopped_by=b)" in reasons[11]
    assert "expected a text that matches /refund/" in reasons[13]
    assert reasons[15] == "judge: pass: helpful and correct"
    assert "did not answer with the JSON asked for" in reasons[16]
    assert not run.passed and run.error is None
    assert (run.reason, run.stopped_by, run.steps, run.turns) == ("end_conversation", "b", 6, 4)
    assert run.input_tokens == 10 * 8 and run.output_tokens == 5 * 8  # 6 conversation answers + 2 judge answers

    # a real thread in the configured storage, seeded before it ran
    from orchestrator.storage import open_storage

    async with open_storage(str(tmp_path / "ev.db")) as storage:
        thread = await storage.get_thread(run.thread_id)
        assert thread.status == "completed" and thread.arguments == {"persona": "Kwame", "goal": "get A1002 shipped"}
        assert await storage.get_value(run.thread_id, "seeded") == {"tier": "gold", "n": 1}
    cassette = json.loads(Path(run.cassette).read_text())
    assert cassette["metadata"]["eval"] == {
        "suite": str(suite.path),
        "scenario": "ship",
        "run": 1,
        "models": {"a": "demo", "b": "demo"},
    }
    assert len(cassette["interactions"]) == 8


async def test_side_b_reads_the_scenario_persona_and_goal(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, ALL_CHECKS))
    seen: list[str] = []

    def script(scenario: str, index: int) -> ScenarioScript:
        return SHIP

    run = (await Evaluator(suite, ScriptedSource(script), storage=":memory:").run()).runs[0]
    for interaction in json.loads(Path(run.cassette).read_text())["interactions"]:
        seen.append(interaction["request"]["body"]["messages"][0]["content"])
    assert any("Who you are: Kwame\nWhat you want: get A1002 shipped" in s for s in seen)


BUDGET = """\
  - id: one
    checks: [{end_reason: end_conversation}]
  - id: two
    checks: [{end_reason: end_conversation}]
"""


async def test_stops_starting_runs_once_the_budget_is_spent(tmp_path: Path) -> None:
    short = ScenarioScript(
        a=[GREET], b=[ResponseSpec(text="Bye", tool_calls=[CallSpec(name="end_chat", arguments={"reason": "x"})])]
    )
    # each run: two answers of 10 + 5 tokens = 30; the budget is spent during the second run
    suite = load_suite(_suite(tmp_path, BUDGET, "k: 3\n  concurrency: 1\n  budget: {tokens: 50}"))
    result = await Evaluator(suite, ScriptedSource(lambda s, i: short), storage=":memory:").run()
    assert [(r.scenario, r.index) for r in result.runs] == [("one", 1), ("two", 1)]  # run-index first
    assert result.stopped_on_budget and result.skipped == 4
    assert "Stopped on budget: 4 run(s) not started." in markdown(build_report(result))


async def test_no_budget_runs_everything_k_times_concurrently(tmp_path: Path) -> None:
    short = ScenarioScript(
        a=[GREET], b=[ResponseSpec(text="Bye", tool_calls=[CallSpec(name="end_chat", arguments={"reason": "x"})])]
    )
    suite = load_suite(_suite(tmp_path, BUDGET, "k: 3\n  concurrency: 4"))
    result = await Evaluator(suite, ScriptedSource(lambda s, i: short), storage=":memory:").run()
    assert sorted((r.scenario, r.index) for r in result.runs) == [(s, i) for s in ("one", "two") for i in (1, 2, 3)]
    assert all(r.passed for r in result.runs) and not result.stopped_on_budget


CHANGES_MIND = """\
  - id: mind
    checks:
      - no_tool_call: {name: process_order, arguments: {action: cancel}}
"""


def _cancelling(scenario: str, index: int) -> ScenarioScript:
    """Runs differ: odd runs cancel (a failure), even runs do not."""
    cancel = [CallSpec(name="process_order", arguments={"order_id": "A1002", "action": "cancel"})] if index % 2 else []
    return ScenarioScript(
        a=[GREET, ResponseSpec(text="On it.", tool_calls=cancel), ResponseSpec(text="Cancelled.")]
        if cancel
        else [GREET, ResponseSpec(text="Kept.")],
        b=[
            ResponseSpec(text="Cancel A1002"),
            ResponseSpec(text="ok", tool_calls=[CallSpec(name="end_chat", arguments={"reason": "x"})]),
        ],
    )


async def test_a_failed_run_replays_offline_with_the_same_transcript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = load_suite(_suite(tmp_path, CHANGES_MIND, "k: 2"))
    result = await Evaluator(suite, ScriptedSource(_cancelling), storage=":memory:").run()
    failed = [r for r in result.runs if not r.passed]
    assert [r.index for r in failed] == [1]
    recorded = json.loads(Path(failed[0].cassette).read_text())["metadata"]["transcript"]

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = await asyncio.to_thread(
        CliRunner().invoke, main, ["eval", "replay", failed[0].cassette]
    )  # a CLI: its own loop
    assert out.exit_code == 1, out.output  # reproduced; its check still fails
    assert "replay matches the recording" in out.output and "failed" in out.output
    assert '✗ no_tool_call: process_order{"action": "cancel"}' in out.output
    assert 'side a calls process_order({"order_id": "A1002", "action": "cancel"})' in out.output
    assert len(recorded) == int(out.output.split("recording (")[1].split(" messages")[0])

    # the same run with the recording changed: the replay says so (exit 2)
    cassette = json.loads(Path(failed[0].cassette).read_text())
    cassette["metadata"]["transcript"][1]["content"] = "something else"
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(cassette))
    out = await asyncio.to_thread(CliRunner().invoke, main, ["eval", "replay", str(tampered)])
    assert out.exit_code == 2 and "differs from the recording" in out.output


async def test_replaying_a_suite_detects_runs_that_left_their_recording(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, CHANGES_MIND, "k: 2"))
    await Evaluator(suite, ScriptedSource(_cancelling), storage=":memory:").run()
    replayed = await Evaluator(suite, ReplaySource(suite.cassette_dir()), storage=":memory:").run()
    assert [r.passed for r in sorted(replayed.runs, key=lambda r: r.index)] == [False, True]
    assert all(r.error is None for r in replayed.runs)

    changed = load_suite(
        _suite(tmp_path, CHANGES_MIND.replace("  - id: mind\n", "  - id: mind\n    arguments: {goal: other}\n"), "k: 2")
    )
    drifted = await Evaluator(changed, ReplaySource(changed.cassette_dir()), storage=":memory:").run()
    assert all(not r.passed and "replay mismatch" in (r.error or "") for r in drifted.runs)
    assert "the system prompt changed" in drifted.runs[0].error


async def test_live_runs_are_recorded_without_the_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-live-test-4f9a8b7c6d5e4f3a2b1c"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    config = tmp_path / "live.yaml"
    config.write_text(
        "providers: {openai: {api_key: '${OPENAI_API_KEY}'}}\n"
        "models: {fast: {provider: openai, model: gpt-4o-mini, retry: {attempts: 1}}}\ndefault_model: fast\n"
    )
    path = _suite(tmp_path, BUDGET.split("  - id: two")[0], config=config)
    path.write_text(
        path.read_text().replace("{a: demo, b: demo}", "{a: fast, b: fast}").replace("judge_model: demo", "")
    )
    suite = load_suite(path)
    model = ScriptedModel(
        [
            ScriptedResponse(text="Hello"),
            ScriptedResponse(text="Bye", tool_calls=[ScriptedCall("end_chat", {"reason": "x"})]),
        ]
    )
    with respx.mock(assert_all_called=False) as router:  # the "network": api.openai.com served by a scripted model
        model.mount(router, "https://api.openai.com/v1")
        result = await Evaluator(suite, LiveSource(), storage=":memory:").run()
        sent = [call.request.headers.get("authorization") for call in router.calls]
    (run,) = result.runs
    assert run.passed, run
    assert sent == [f"Bearer {secret}"] * 2  # the key was sent...
    assert secret not in Path(run.cassette).read_text()  # ...and never recorded

    monkeypatch.delenv("OPENAI_API_KEY")  # a replay needs no key
    replayed = await Evaluator(suite, ReplaySource(suite.cassette_dir()), storage=":memory:").run()
    assert replayed.runs[0].passed and replayed.runs[0].error is None
    assert "OPENAI_API_KEY" not in os.environ


def test_the_example_suite_runs_offline_from_its_cassettes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(ROOT)
    out = CliRunner().invoke(
        main, ["eval", "evals/support_demo.yaml", "--db", str(tmp_path / "ev.db"), "--out", str(tmp_path)]
    )
    assert out.exit_code == 0, out.output
    assert "| changes_mind | 3 | 0/3 | 0% [0–56%] | 0% | 0% | - |" in out.output
    assert "| angry_wants_person | 3 | 2/3 | 67% [21–94%] | 33% | 0% | 33% |" in out.output
    assert "| **overall** | 15 | 11/15 | 73% [48–89%] | 67% [27–100%] | 60% [20–100%] |" in out.output
    assert "**pass^3 = 60%**, 95% interval 20%–100% (bootstrap)" in out.output
    assert "Fails every time: `changes_mind`." in out.output
    assert "Flaky (passed and failed in this eval): `angry_wants_person` (2/3, flips 33%)." in out.output
    assert (
        "replay offline: `orchestrator eval replay cassettes/evals/support_demo/changes_mind/run-1.json`" in out.output
    )

    report = json.loads((tmp_path / "support_demo.json").read_text())
    assert report["score"]["pass_hat"] == {"1": pytest.approx(11 / 15), "2": pytest.approx((3 + 1 / 3) / 5), "3": 0.6}
    assert all(r["error"] is None for r in report["eval"]["runs"])  # every run followed its recording
    junit = ET.parse(tmp_path / "support_demo.junit.xml").getroot()
    assert (junit.get("tests"), junit.get("failures")) == ("15", "4")

    strict = CliRunner().invoke(
        main,
        [
            "eval",
            "evals/support_demo.yaml",
            "--scenario",
            "order_ships",
            "--db",
            str(tmp_path / "ev.db"),
            "--out",
            str(tmp_path),
            "--fail-under",
            "1",
        ],
    )
    assert strict.exit_code == 0, strict.output
    failing = CliRunner().invoke(
        main,
        [
            "eval",
            "evals/support_demo.yaml",
            "--scenario",
            "changes_mind",
            "-k",
            "1",
            "--db",
            str(tmp_path / "ev.db"),
            "--out",
            str(tmp_path),
            "--fail-under",
            "0.5",
        ],
    )
    assert failing.exit_code == 1 and "pass^1 = 0.00 is below --fail-under 0.50" in failing.output


def test_the_example_failure_replays_with_its_transcript(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    cassette = "cassettes/evals/support_demo/changes_mind/run-1.json"
    out = CliRunner().invoke(main, ["eval", "replay", cassette])
    assert out.exit_code == 1, out.output
    assert "side b: Oh wait, I changed my mind. Please keep it and ship it instead!" in out.output
    assert '✗ values: order_status:A1002: order_status:A1002: expected "shipped", got "cancelled"' in out.output
    assert f"{cassette}: replay matches the recording" in out.output


async def test_assert_suite_fails_a_test_under_the_threshold() -> None:
    report = await assert_suite(ROOT / "evals" / "support_demo.yaml", threshold=0.6)
    assert report.score.k == 3
    with pytest.raises(AssertionError, match=r"pass\^3 = 0.60 is below the threshold 0.70") as caught:
        await assert_suite(ROOT / "evals" / "support_demo.yaml", threshold=0.7)
    assert "### Failed runs" in str(caught.value)


def test_compare_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    args: list[Any] = ["--db", str(tmp_path / "ev.db")]
    CliRunner().invoke(
        main, ["eval", "evals/support_demo.yaml", "--scenario", "changes_mind", "--out", str(tmp_path / "a"), *args]
    )
    CliRunner().invoke(
        main, ["eval", "evals/support_demo.yaml", "--scenario", "order_ships", "--out", str(tmp_path / "b"), *args]
    )
    out = CliRunner().invoke(
        main, ["eval", "compare", str(tmp_path / "a" / "support_demo.json"), str(tmp_path / "b" / "support_demo.json")]
    )
    assert out.exit_code == 0, out.output
    assert "| changes_mind | 0/3 (pass^3 0%) | - | removed |" in out.output
    assert "| order_ships | - | 3/3 (pass^3 100%) | added |" in out.output
    bad = CliRunner().invoke(
        main, ["eval", "compare", str(ROOT / "pyproject.toml"), str(tmp_path / "b" / "support_demo.json")]
    )
    assert bad.exit_code == 1 and "not an eval report" in bad.output


class _Hanging:
    """A source whose model stops sending mid-answer and never finishes."""

    records = False
    label = "hanging"

    def __init__(self, runs: int) -> None:
        self.all_waiting = asyncio.Event()

        def answer(body: dict[str, Any]) -> ScriptedResponse:
            if len(self.model.requests) == runs:
                self.all_waiting.set()
            return ScriptedResponse(text="Hello there, how", hang_after=2)

        self.model = ScriptedModel(answer)

    def model_for(self, scenario: str, index: int, voices: Any) -> RunModel:
        router = respx.Router(assert_all_called=False, assert_all_mocked=True)
        self.model.mount(router, "http://scripted.invalid/v1")
        return RunModel(router=router)


async def test_cancelling_an_eval_stops_its_runs_and_unpatches_httpx(tmp_path: Path) -> None:
    import httpx

    original = httpx.AsyncHTTPTransport.handle_async_request
    suite = load_suite(_suite(tmp_path, BUDGET, "k: 2\n  concurrency: 4"))
    source = _Hanging(runs=4)
    task = asyncio.create_task(Evaluator(suite, source, storage=":memory:").run())
    await asyncio.wait_for(source.all_waiting.wait(), 30)  # all four runs are waiting on their model
    assert httpx.AsyncHTTPTransport.handle_async_request is not original  # routed while running
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.model.streams_closed == source.model.streams_opened == 4
    assert httpx.AsyncHTTPTransport.handle_async_request is original
