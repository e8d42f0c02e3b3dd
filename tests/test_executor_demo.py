"""The shipped demo on its cassette, and a tool's injected message racing the step's other results
(it changes neither what the model sees nor what a transcript compares)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support import Q, definitions, tool_names

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.engine.views import OPENING_MESSAGE
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------
# 6. the shipped dual_ai demo on its cassette
# ---------------------------------------------------------------------------


def _without_injected(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e["side"] is not None]


def _injected_within_its_step(entries: list[dict[str, Any]]) -> bool:
    """The (one) injected message sits after the call that injected it and before the next text."""
    at = next(i for i, e in enumerate(entries) if e["side"] is None)
    call = next(i for i, e in enumerate(entries) if "update_context" in [c["name"] for c in e.get("tool_calls", [])])
    after = next(i for i, e in enumerate(entries) if i > call and e["role"] == "assistant" and e["content"])
    return call < at < after


async def test_support_demo_completes_on_its_cassette_with_per_side_views(tmp_path: Path) -> None:
    from orchestrator.cli.session import transcript
    from orchestrator.definitions.loader import load_definitions
    from orchestrator.runtime import Runtime
    from orchestrator.storage.sqlite import SQLiteStorage
    from providers.cassette import load_cassette, replay
    from providers.config import load_config

    defs = load_definitions(ROOT / "agents")
    cassette = load_cassette(ROOT / "cassettes" / "support_demo.json")
    runtime = Runtime(
        defs, config=load_config(ROOT / "configs" / "default.yaml"), storage=SQLiteStorage(str(tmp_path / "demo.db"))
    )
    async with runtime:
        with replay(cassette) as replayer:
            thread = await runtime.create_thread("support_demo")
            result = await thread.run()
            sent = [json.loads(call.request.content) for call in replayer.router.calls]  # reset on exit
        assert replayer.remaining == 0  # every recorded request was made, each matching its recording
        messages = (await thread.get_messages(include_silent=True)).messages
        context = await thread.state.get_value("context:preferences")

    assert (result.reason, result.stopped_by) == ("end_conversation", "b")
    assert thread.record.status == "completed"
    # update_context's injected message is stored while process_order may still run, so
    # its place among that step's results varies from run to run (bugs.md E2): compare
    # the rest exactly, and that message's place up to that step
    got, expected = transcript(messages), cassette.metadata["transcript"]
    assert _without_injected(got) == _without_injected(expected)
    assert _injected_within_its_step(got) and _injected_within_its_step(expected)
    assert context == {"shipping": "priority"}

    a_prompt, b_prompt = defs.prompts["support_agent"].prompt, defs.prompts["customer"].prompt
    a_requests = [r for r in sent if r["messages"][0]["content"] == a_prompt]
    b_requests = [r for r in sent if r["messages"][0]["content"] == b_prompt]
    assert len(a_requests) + len(b_requests) == len(sent) == 8 and len(b_requests) == 3
    assert a_requests[0]["messages"][1:] == [{"role": "user", "content": OPENING_MESSAGE}]

    a_texts = [m.content for m in messages if m.side == "a" and m.role == "assistant" and m.content]
    b_texts = [m.content for m in messages if m.side == "b" and m.role == "assistant" and m.content]
    injected = [m.content for m in messages if m.side is None and m.role == "system"]
    assert injected == ['Updated preferences: {"shipping": "priority"}']

    for request in b_requests:
        assert tool_names(request) == ["end_chat"]
        for m in request["messages"]:
            # side b never sees side a's tool calls or results
            assert m["role"] != "tool" and "tool_calls" not in m
            assert m["role"] == "system" or m["content"] in a_texts + b_texts
            assert m["role"] != "assistant" or m["content"] in b_texts
            assert m["role"] != "user" or m["content"] in a_texts
        assert "Kwame Mensah" not in json.dumps(request["messages"])  # lookup_customer's result is a's alone
    for request in a_requests:
        assert tool_names(request) == [
            "lookup_order",
            "lookup_customer",
            "process_order",
            "get_current_time",
            "update_context",
        ]
        users = [m["content"] for m in request["messages"] if m["role"] == "user" and m["content"] != OPENING_MESSAGE]
        assert users == b_texts[: len(users)]  # b's text arrives as user, in order
    # the system message update_context injected reaches both sides' next request
    assert {"role": "system", "content": injected[0]} in a_requests[-1]["messages"]
    assert {"role": "system", "content": injected[0]} in b_requests[-1]["messages"]
    assert all({"role": "system", "content": injected[0]} not in r["messages"] for r in sent[:6])
    # side a's last view: the queued notification is a call of the same message, answers right after
    last_a = a_requests[-1]["messages"]
    turn = next(
        i
        for i, m in enumerate(last_a)
        if [c["function"]["name"] for c in m.get("tool_calls") or []]
        == ["process_order", "send_notification", "update_context"]
    )
    assert [m["role"] for m in last_a[turn + 1 : turn + 5]] == ["tool", "tool", "tool", "system"]


# ---------------------------------------------------------------------------
# a tool's injected message racing the step's other results (bugs.md E2)
# ---------------------------------------------------------------------------


async def _race(make_runtime: Any, *, inject_first: bool) -> tuple[list[dict[str, Any]], list[Any]]:
    """Side a calls `work` and `note` together; `note` injects a system message
    either before or after `work`'s result is stored (ordered by events, no sleeps)."""
    import asyncio

    from orchestrator import define_hook

    work_stored, injected = asyncio.Event(), asyncio.Event()

    async def work(state: Any, args: Q) -> ToolResult:
        if inject_first:
            await injected.wait()
        return ToolResult.ok("worked")

    async def note(state: Any, args: Q) -> ToolResult:
        if not inject_first:
            await work_stored.wait()
        await state.inject_message(role="system", content="Context: VIP customer")
        injected.set()
        return ToolResult.ok("noted")

    def after(state: Any, call: Any, result: Any) -> None:
        if call.name == "work":
            work_stored.set()

    tools = {
        "work": define_tool(description="Work", args=Q, execute=work),
        "note": define_tool(description="Note", args=Q, execute=note),
    }
    prompts = {"pa": define_prompt(prompt="You are side a.", tool_description="side a", tools=("work", "note"))}
    defs = definitions(
        tools=tools,
        prompts=prompts,
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
        hooks={"after_tool_call_success": define_hook("after_tool_call_success", after)},
    )
    rt, model = await make_runtime(
        defs, [R(tool_calls=[C("work", {}), C("note", {})]), R(text="Done.")], settings=RuntimeSettings(tool_timeout=5)
    )
    thread = await rt.create_thread("chat")
    await thread.send("go")
    return model.requests, (await thread.get_messages()).messages


async def test_injected_message_timing_does_not_change_what_the_model_sees(make_runtime: Any) -> None:
    first_requests, first = await _race(make_runtime, inject_first=True)
    later_requests, later = await _race(make_runtime, inject_first=False)
    assert [m.role for m in first] != [m.role for m in later]  # storage order differs with timing...
    assert first_requests == later_requests  # ...the requests do not
    assert [m["role"] for m in later_requests[1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "system",
    ]


async def test_transcript_does_not_depend_on_tool_timing(make_runtime: Any) -> None:
    from orchestrator.cli.session import compare, transcript

    _, first = await _race(make_runtime, inject_first=True)
    _, later = await _race(make_runtime, inject_first=False)
    assert compare(transcript(first), transcript(later)) == []
