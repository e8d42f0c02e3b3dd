"""Eval scenarios decide the calls that wait for approval (`approvals:`) and check that one was asked for.

The agent is a dual_ai clerk and customer on the scripted `demo` model (OpenAI-wire SSE served at the
scripted provider's URL); `refund` needs approval, `lookup` does not. What the refund tool received,
or the rejection the model read, shows in the stored tool results.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.eval import Evaluator, ScriptedSource, load_suite
from orchestrator.eval.runner import RunOutcome
from orchestrator.eval.sources import ScenarioScript
from orchestrator.eval.suite import SuiteError
from providers.offline import CallSpec, ResponseSpec

ROOT = Path(__file__).resolve().parent.parent

TOOLS = {
    "refund": """
from pydantic import BaseModel
from orchestrator import ToolResult, define_tool

class Args(BaseModel):
    order_id: str
    amount: float

async def execute(state, args: Args) -> ToolResult:
    await state.set_value(f"refunded:{args.order_id}", args.amount)
    return ToolResult.ok(f"refunded {args.amount} on {args.order_id}")

tool = define_tool(description="Refund an order", args=Args, execute=execute, needs_approval=True)
""",
    "lookup": """
from pydantic import BaseModel
from orchestrator import ToolResult, define_tool

class Args(BaseModel):
    order_id: str

async def execute(state, args: Args) -> ToolResult:
    return ToolResult.ok(f"{args.order_id}: delivered")

tool = define_tool(description="Look up an order", args=Args, execute=execute)
""",
    "end_chat": """
from orchestrator import ToolResult, define_tool

async def execute(state) -> ToolResult:
    return ToolResult.ok("bye")

tool = define_tool(description="End the chat", execute=execute)
""",
}


def _definitions(root: Path) -> Path:
    defs = root / "defs"
    for folder in ("tools", "prompts", "agents"):
        (defs / folder).mkdir(parents=True)
    for name, source in TOOLS.items():
        (defs / "tools" / f"{name}.py").write_text(source)
    (defs / "prompts" / "clerk.py").write_text(
        "from orchestrator import define_prompt\n"
        "prompt = define_prompt(prompt='You are the refunds clerk.', tool_description='clerk', "
        "tools=('refund', 'lookup'))\n"
    )
    (defs / "prompts" / "customer.py").write_text(
        "from orchestrator import define_prompt\n"
        "prompt = define_prompt(prompt='You are a customer wanting a refund.', tool_description='customer', "
        "tools=('end_chat',))\n"
    )
    (defs / "agents" / "refunds.py").write_text(
        "from orchestrator import Side, define_agent\n"
        "agent = define_agent(type='dual_ai', side_a=Side('clerk'), "
        "side_b=Side('customer', end_conversation_tool='end_chat'), max_session_turns=6)\n"
    )
    return defs


def _suite(root: Path, scenarios: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "rules.py").write_text("def big(arguments):\n    return arguments['amount'] > 100\n")
    path = root / "suite.yaml"
    path.write_text(f"""\
agent: refunds
definitions: {_definitions(root)}
config: {ROOT / "configs" / "default.yaml"}
cassettes: cas
defaults:
  models: {{a: demo, b: demo}}
scenarios:
{scenarios}""")
    return path


def _script(amount: float) -> ScenarioScript:
    return ScenarioScript(
        a=[
            ResponseSpec(
                tool_calls=[
                    CallSpec(name="lookup", arguments={"order_id": "A1"}),
                    CallSpec(name="refund", arguments={"order_id": "A1", "amount": amount}),
                ]
            ),
            ResponseSpec(text="Done."),
        ],
        b=[ResponseSpec(text="Thanks, bye.", tool_calls=[CallSpec(name="end_chat")])],
    )


async def _run(path: Path, amount: float, tmp_path: Path) -> tuple[RunOutcome, Evaluator]:
    evaluator = Evaluator(
        load_suite(path), ScriptedSource(lambda s, i: _script(amount)), storage=str(tmp_path / "e.db")
    )
    run = await evaluator.run()
    [outcome] = run.runs
    return outcome, evaluator


async def _tool_results(evaluator: Evaluator, thread_id: str) -> dict[str, str]:
    async with evaluator.runtime:
        thread = await evaluator.runtime.get_thread(thread_id)
        messages = (await thread.get_messages()).messages
    return {m.name or "": str(m.content) for m in messages if m.role == "tool"}


@pytest.mark.asyncio
async def test_approve_all_runs_the_call_and_the_check_sees_the_request(tmp_path: Path) -> None:
    path = _suite(
        tmp_path,
        """\
  - id: approve
    approvals: approve all
    checks:
      - approval_requested: refund
      - no_approval_requested: lookup
      - end_reason: end_conversation
""",
    )
    outcome, evaluator = await _run(path, 50.0, tmp_path)
    assert outcome.passed, outcome.model_dump_json(indent=1)
    assert (await _tool_results(evaluator, outcome.thread_id or ""))["refund"] == "refunded 50.0 on A1"
    assert outcome.checks[0].reason.startswith("1 call(s) of 'refund' waited for approval (") and "approved" in (
        outcome.checks[0].reason
    )


@pytest.mark.asyncio
async def test_rules_by_predicate_reject_with_their_reason(tmp_path: Path) -> None:
    scenarios = """\
  - id: rules
    approvals:
      rules:
        - {tool: refund, predicate: "rules.py:big", decision: reject, reason: over the limit}
        - {tool: refund, arguments: {order_id: A1}, decision: approve}
    checks:
      - approval_requested: refund
"""
    outcome, evaluator = await _run(_suite(tmp_path / "big", scenarios), 250.0, tmp_path / "big")
    assert outcome.passed, outcome.model_dump_json(indent=1)
    refund = (await _tool_results(evaluator, outcome.thread_id or ""))["refund"]
    assert "rejected and did not run" in refund and refund.endswith("over the limit")

    outcome, evaluator = await _run(_suite(tmp_path / "small", scenarios), 20.0, tmp_path / "small")
    assert (await _tool_results(evaluator, outcome.thread_id or ""))["refund"] == "refunded 20.0 on A1"


@pytest.mark.asyncio
async def test_no_approvals_leaves_the_run_waiting_and_checks_fail_with_reasons(tmp_path: Path) -> None:
    path = _suite(
        tmp_path,
        """\
  - id: nobody
    checks:
      - end_reason: awaiting_approval
      - no_approval_requested: refund
      - approval_requested: lookup
""",
    )
    outcome, evaluator = await _run(path, 50.0, tmp_path)
    assert outcome.reason == "awaiting_approval"
    assert [c.passed for c in outcome.checks] == [True, False, False]
    assert "still waiting" in outcome.checks[1].reason
    assert "no call of 'lookup' waited for approval (others that did: ['refund'])" in outcome.checks[2].reason
    assert "refund" not in await _tool_results(evaluator, outcome.thread_id or "")


def test_bad_approvals_name_the_field(tmp_path: Path) -> None:
    path = _suite(tmp_path, "  - id: x\n    approvals: approve some\n    checks: [{end_reason: rest}]\n")
    with pytest.raises(SuiteError, match=r"approvals.*'approve all', 'reject all'"):
        load_suite(path)
    path.write_text(
        path.read_text().replace(
            "approvals: approve some", "approvals: {rules: [{tool: refund, decision: reject, predicate: 'no.py:f'}]}"
        )
    )
    with pytest.raises(SuiteError, match=r"scenarios.0.approvals.rules.0.predicate: no file 'no.py'"):
        load_suite(path)
