"""The two-sided loop, end to end: LiteLLM builds each request, the runtime's OpenAI-wire reader reads the stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, Field
from support import definitions

from orchestrator import Side, ToolResult, define_agent, define_hook, define_prompt, define_tool
from orchestrator.engine.executor import ExecutionFailed
from orchestrator.engine.views import OPENING_MESSAGE
from providers.scripted import ScriptedCall, ScriptedFault, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall


class LookupArgs(BaseModel):
    order_id: str = Field(description="Order ID")
    note: str = ""


RAN: list[tuple[str, dict[str, Any]]] = []


async def _lookup(state: Any, args: LookupArgs) -> ToolResult:
    RAN.append(("lookup_order", args.model_dump()))
    return ToolResult(status="success", result=f"Order {args.order_id}: shipped")


async def _end(state: Any, args: Any) -> dict:
    return {"status": "success", "result": "bye"}


class EndArgs(BaseModel):
    reason: str = ""


lookup = define_tool(description="Look up an order", args=LookupArgs, execute=_lookup, progress_argument="order_id")
end_chat = define_tool(description="End the chat", args=EndArgs, execute=_end)


def support_defs(**extra: Any):
    prompts = {
        "agent_p": define_prompt(
            prompt="You are support for {company}.",
            tool_description="support",
            tools=("lookup_order",),
            variables={"company": "ACME"},
        ),
        "customer_p": define_prompt(prompt="You are a customer.", tool_description="customer", tools=("end_chat",)),
    }
    agents = {
        "demo": define_agent(
            type="dual_ai",
            side_a=Side("agent_p", max_steps=4),
            side_b=Side("customer_p", end_conversation_tool="end_chat"),
            max_session_turns=6,
        ),
        "chat": define_agent(type="ai_human", side_a=Side("agent_p")),
    }
    return definitions(
        tools={"lookup_order": lookup, "end_chat": end_chat, **extra.get("tools", {})},
        prompts={**prompts, **extra.get("prompts", {})},
        agents={**agents, **extra.get("agents", {})},
        hooks=extra.get("hooks"),
    )


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


async def test_dual_ai_conversation_with_tool_and_end(make_runtime: Any) -> None:
    script = [
        R(text="Hello, how can I help?"),  # a: turn 1
        R(text="Where is order 42?"),  # b
        R(tool_calls=[C("lookup_order", {"order_id": "42"})]),  # a calls a tool
        R(text="Order 42 has shipped."),  # a answers
        R(tool_calls=[C("end_chat", {"reason": "done"})], text="Thanks!"),  # b ends
    ]
    rt, model = await make_runtime(support_defs(), script)
    thread = await rt.create_thread("demo")
    result = await thread.run()

    assert result.reason == "end_conversation" and result.stopped_by == "b"
    assert (result.step_count, result.side_a_step_count, result.side_b_step_count) == (5, 3, 2)
    assert RAN == [("lookup_order", {"order_id": "42", "note": ""})]
    # side a's first request: rendered system prompt and the opening message
    first = model.requests[0]["messages"]
    assert first[0] == {"role": "system", "content": "You are support for ACME."}
    assert first[1]["content"] == OPENING_MESSAGE
    assert [t["function"]["name"] for t in model.requests[0]["tools"]] == ["lookup_order"]
    # side b sees a's text as user, and only its own tools
    b_view = model.requests[1]["messages"]
    assert b_view[1:] == [{"role": "user", "content": "Hello, how can I help?"}]
    assert [t["function"]["name"] for t in model.requests[1]["tools"]] == ["end_chat"]
    # side a's view after its tool call: its own roles kept, b's text as user
    a_view = model.requests[3]["messages"]
    roles = [(m["role"], m.get("content")) for m in a_view[1:]]
    assert roles[:3] == [("assistant", "Hello, how can I help?"), ("user", "Where is order 42?"), ("assistant", None)]
    assert a_view[3]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert a_view[4] == {
        "role": "tool",
        "tool_call_id": a_view[3]["tool_calls"][0]["id"],
        "content": "Order 42: shipped",
    }
    # b never sees a's tool call or result
    b_view2 = model.requests[4]["messages"]
    assert all(m["role"] in ("system", "user", "assistant") and "tool_calls" not in m for m in b_view2)
    assert [m["content"] for m in b_view2 if m["role"] == "user"] == ["Hello, how can I help?", "Order 42 has shipped."]

    page = await thread.get_messages()
    assert [m.seq for m in page.messages] == sorted(m.seq for m in page.messages)
    assert thread.record.status == "completed"
    assert thread.record.usage.input_tokens == 50


async def test_tool_call_started_fires_with_progress_value_before_call_finishes(make_runtime: Any) -> None:
    seen: list[Any] = []
    hook = define_hook("tool_call_started", lambda state, call: seen.append(call))
    script = [
        R(tool_calls=[C("lookup_order", '{"order_id": "A\\"1\\u00e9", "note": "' + "x" * 200 + '"}')], chunk_size=5),
        R(text="done"),
    ]
    rt, _ = await make_runtime(support_defs(hooks={"tool_call_started": hook}), script)
    thread = await rt.create_thread("chat")
    events: list[Any] = []

    async def watch() -> None:
        async for e in thread.events():
            events.append(e)

    watcher = asyncio.create_task(watch())
    await thread.send("where is my order?")
    await asyncio.sleep(0)
    watcher.cancel()
    assert len(seen) == 1 and seen[0].progress_value == 'A"1é' and seen[0].name == "lookup_order"
    started = [e for e in events if e.type == "tool_call_started"]
    assert len(started) == 1 and started[0].data["progress_value"] == 'A"1é'
    kinds = [e.type for e in events]
    # started fires before the assistant message (the whole call) is stored
    first_msg = next(i for i, e in enumerate(events) if e.type == "message_created" and e.data["role"] == "assistant")
    assert kinds.index("tool_call_started") < first_msg
    assert [e.seq for e in events] == sorted({e.seq for e in events})


async def test_ai_human_rests_after_side_a(make_runtime: Any) -> None:
    rt, model = await make_runtime(support_defs(), [R(text="Hi! How can I help?"), R(text="Sure.")])
    thread = await rt.create_thread("chat", user_id="u1")
    result = await thread.send("hello")
    assert result.output == "Hi! How can I help?" and result.reason == "rest"
    assert thread.execution is None and thread.record.status == "idle"
    await thread.send("thanks")
    assert model.requests[1]["messages"][1:] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": "thanks"},
    ]


async def test_a_finished_thread_keeps_nothing_in_memory_unless_watched(make_runtime: Any) -> None:
    """The bus's ring of live deltas is for reconnecting during an execution; kept after
    it for every thread, a long-running server would grow without bound."""
    rt, _ = await make_runtime(support_defs(), [R(text="Hi there, how can I help you today?", chunk_size=3)] * 3)
    channels = rt.services.bus._channels
    for _ in range(2):
        thread = await rt.create_thread("chat")
        await thread.send("hello")
        assert thread.id not in channels
    watched = await rt.create_thread("chat")
    seen: list[str] = []

    async def watch() -> None:
        async for event in watched.events():
            seen.append(event.type)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)
    await watched.send("hello")
    assert watched.id in channels and "text_delta" in seen  # a watcher keeps it live
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher
    assert watched.id not in channels  # the last watcher out frees it
    replay = [e.type async for e in _until_stopped(watched.events(after=0))]
    assert "message_created" in replay and "text_delta" not in replay  # the durable log remains


async def _until_stopped(events: Any) -> Any:
    async for event in events:
        yield event
        if event.type == "execution_stopped":
            return


async def test_parallel_calls_and_bad_calls_become_error_results(make_runtime: Any) -> None:
    script = [
        R(
            tool_calls=[
                C("lookup_order", {"order_id": "1"}),
                C("lookup_order", "{not json"),
                C("lookup_order", {"order": 5}),
                C("nope", {}),
            ]
        ),
        R(text="ok"),
    ]
    rt, model = await make_runtime(support_defs(), script)
    thread = await rt.create_thread("chat")
    await thread.send("x")
    tool_msgs = [m for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == "Order 1: shipped"
    assert "Invalid JSON" in tool_msgs[1]["content"]
    assert "order_id" in tool_msgs[2]["content"] and "Invalid arguments" in tool_msgs[2]["content"]
    assert "Unknown tool 'nope'" in tool_msgs[3]["content"] and "lookup_order" in tool_msgs[3]["content"]
    stored = (await thread.get_messages()).messages
    assert [m.tool_status for m in stored if m.role == "tool"] == ["success", "error", "error", "error"]


async def test_provider_error_fails_cleanly_and_thread_runs_again(make_runtime: Any) -> None:
    rt, _ = await make_runtime(support_defs(), [ScriptedFault(status=401, message="bad key"), R(text="back")])
    thread = await rt.create_thread("chat")
    with pytest.raises(ExecutionFailed):
        await thread.send("hi")
    assert thread.record.status == "failed"
    result = await thread.send("again")
    assert result.output == "back"
    texts = [m.content for m in (await thread.get_messages()).messages]
    assert texts == ["hi", "again", "back"]
