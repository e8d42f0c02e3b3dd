"""A dual_ai agent's `approver` prompt decides its calls waiting for approval, as a simulated person.

Offline: the model is a function (providers.offline) answering by the request's system message: the
clerk calls `refund` (which needs approval), the approver answers what the test wrote, the customer ends
the chat. The approver's answer is parsed strictly; a bad one rejects the call, saying why.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator import Runtime
from orchestrator.definitions.loader import LoadError
from orchestrator.engine.approver import parse_approver_answer

ROOT = Path(__file__).resolve().parent.parent

MODEL = """
import json

APPROVER_SAYS = {answer!r}

def answer(body):
    system = body["messages"][0]["content"]
    if "You decide whether a tool call may run" in system:
        asked = json.loads(body["messages"][1]["content"].split("\\n", 1)[1])
        assert asked == {{"amount": 250.0, "order_id": "A1"}}, asked
        return APPROVER_SAYS
    if "refunds clerk" in system:
        done = [m for m in body["messages"] if m["role"] == "tool"]
        if not done:
            return {{"tool_calls": [{{"name": "refund", "arguments": {{"order_id": "A1", "amount": 250}}}}]}}
        return "Done: " + done[-1]["content"]
    return {{"text": "bye", "tool_calls": [{{"name": "end_chat"}}]}}
"""


def _project(root: Path, approver_answer: str, approver: str = "manager") -> Path:
    defs = root / "defs"
    for folder in ("tools", "prompts", "agents"):
        (defs / folder).mkdir(parents=True, exist_ok=True)
    (defs / "tools" / "refund.py").write_text(
        textwrap.dedent("""
        from pydantic import BaseModel
        from orchestrator import ToolResult, define_tool

        class Args(BaseModel):
            order_id: str
            amount: float

        async def execute(state, args: Args) -> ToolResult:
            return ToolResult.ok(f"refunded {args.amount} on {args.order_id}")

        tool = define_tool(description="Refund an order", args=Args, execute=execute, needs_approval=True)
        """)
    )
    (defs / "tools" / "end_chat.py").write_text(
        "from orchestrator import ToolResult, define_tool\n"
        "async def execute(state) -> ToolResult:\n    return ToolResult.ok('bye')\n"
        "tool = define_tool(description='End the chat', execute=execute)\n"
    )
    prompts = {
        "clerk": ("You are the refunds clerk.", "('refund',)"),
        "customer": ("You are a customer.", "('end_chat',)"),
        "manager": ("You are a careful manager; refunds over 100 need a reason.", "()"),
    }
    for name, (text, tools) in prompts.items():
        (defs / "prompts" / f"{name}.py").write_text(
            f"from orchestrator import define_prompt\n"
            f"prompt = define_prompt(prompt={text!r}, tool_description={name!r}, tools={tools})\n"
        )
    (defs / "agents" / "refunds.py").write_text(
        "from orchestrator import Side, define_agent\n"
        "agent = define_agent(type='dual_ai', side_a=Side('clerk'), "
        f"side_b=Side('customer', end_conversation_tool='end_chat'), max_session_turns=4, approver={approver!r})\n"
    )
    (root / "model.py").write_text(MODEL.format(answer=approver_answer))
    return defs


async def _run(root: Path, approver_answer: str) -> tuple[str, dict[str, str]]:
    defs = _project(root, approver_answer)
    model = f"{root / 'model.py'}:answer"
    runtime = Runtime.from_path(defs, config=ROOT / "configs" / "default.yaml", storage=":memory:", model=model)
    async with runtime:
        thread = await runtime.create_thread("refunds")
        result = await thread.run()
        messages = (await thread.get_messages()).messages
        decided = await thread.waiting_calls(include_decided=True)
    assert [w.tool for w in decided] == ["refund"] and decided[0].decision is not None
    return result.reason, {m.name or "": str(m.content) for m in messages if m.role == "tool"}


@pytest.mark.asyncio
async def test_the_approver_approves_and_the_call_runs(tmp_path: Path) -> None:
    reason, results = await _run(tmp_path, '{"decision": "approve"}')
    assert results["refund"] == "refunded 250.0 on A1"
    assert reason == "end_conversation"


@pytest.mark.asyncio
async def test_the_approver_rejects_with_its_reason(tmp_path: Path) -> None:
    reason, results = await _run(tmp_path, '{"decision": "reject", "reason": "over 100 without a receipt"}')
    assert "rejected and did not run" in results["refund"] and results["refund"].endswith("over 100 without a receipt")
    assert reason == "end_conversation"


@pytest.mark.asyncio
async def test_a_bad_approver_answer_rejects_saying_so(tmp_path: Path) -> None:
    _, results = await _run(tmp_path, "Sure, go ahead!")
    assert "the approver's answer was not the JSON asked for" in results["refund"]
    assert "'Sure, go ahead!'" in results["refund"]


def test_parse_approver_answer_is_strict() -> None:
    assert parse_approver_answer('{"decision": "approve"}').kind == "approved"
    assert parse_approver_answer('```json\n{"decision": "approve"}\n```').kind == "approved"
    rejected = parse_approver_answer('{"decision": "reject", "reason": "no"}')
    assert (rejected.kind, rejected.reason) == ("rejected", "no")
    for bad in ('{"decision": "reject"}', '{"decision": "yes"}', '{"decision": "approve", "x": 1}', "approve", ""):
        decision = parse_approver_answer(bad)
        assert decision.kind == "rejected" and "not the JSON asked for" in (decision.reason or ""), bad


def test_an_unknown_approver_prompt_is_a_load_problem(tmp_path: Path) -> None:
    defs = _project(tmp_path, "{}", approver="nobody")
    with pytest.raises(LoadError, match="approver 'nobody' is not a prompt"):
        Runtime.from_path(defs, config=ROOT / "configs" / "default.yaml", storage=":memory:")
