"""orchestrator.testing.checks: what the plugin's assertions (and evals) decide, on a real thread."""

from __future__ import annotations

from typing import Any

from support import Q, definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.testing.checks import (
    CallMade,
    calls_made,
    check_end_reason,
    check_no_tool_call,
    check_tool_calls,
    check_values,
    is_subset,
)
from providers.scripted import ScriptedCall as C
from providers.scripted import ScriptedResponse as R


def _defs() -> Any:
    async def remember(state: Any, args: Q) -> ToolResult:
        await state.set_value("order", {"id": args.q, "status": "refunded", "lines": [1, 2]})
        return ToolResult.ok("remembered")

    return definitions(
        tools={
            "remember": define_tool(description="Remember", args=Q, execute=remember),
            "other": define_tool(description="Other", args=Q, execute=remember),
        },
        prompts={"pa": define_prompt(prompt="p", tool_description="a", tools=("remember", "other"))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
    )


async def test_checks_on_a_conversation(make_runtime: Any) -> None:
    script = [R(tool_calls=[C("remember", {"q": "A1"}), C("other", {"q": "B2"})]), R(text="done")]
    rt, _ = await make_runtime(_defs(), script)
    thread = await rt.create_thread("chat")
    result = await thread.send("go")
    calls = await calls_made(thread)

    assert [c.name for c in calls] == ["remember", "other"]
    assert check_tool_calls(calls, [("remember", {"q": "A1"}), "other"])
    failed = check_tool_calls(calls, ["other", "remember"])
    assert not failed and "expected a call remember in order" in failed.reason and 'other({"q": "B2"})' in failed.reason
    assert check_tool_calls(calls, ["other", "remember"], ordered=False)
    assert not check_tool_calls(calls, [("remember", {"q": "Z"})], ordered=False)
    assert check_no_tool_call(calls, ("other", {"q": "A1"}))
    assert not check_no_tool_call(calls, "other")

    assert await check_values(thread, {"order": {"status": "refunded"}}, subset=True)
    wrong = await check_values(thread, {"order": {"status": "open"}}, subset=True)
    assert not wrong and 'order: expected {"status": "open"}' in wrong.reason
    assert not await check_values(thread, {"order": {"status": "refunded"}})  # not equal without subset

    assert check_end_reason(result, result.reason)
    assert not check_end_reason(result, "end_conversation", by="b")


def test_subset_rules() -> None:
    assert is_subset({"a": 1}, {"a": 1.0, "b": 2})
    assert not is_subset({"a": True}, {"a": 1})
    assert not is_subset([1], [1, 2])  # lists are compared whole
    assert is_subset({"x": [{"y": 1}]}, {"x": [{"y": 1, "z": 2}]})
    assert CallMade("t", {"b": 1, "a": 2}, "a", 0).describe() == 't({"a": 2, "b": 1})'
