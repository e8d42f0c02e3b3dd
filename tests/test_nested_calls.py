"""Prompts and agents called as tools, end to end: a nested loop one level deeper, a child thread with
the call's arguments, and both resumed after a crash (a `Crash` raised from a hook stands in for the
process dying). LiteLLM builds the requests; the runtime's OpenAI-wire reader reads the scripted model's
streams."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field
from support import Crash, Q, chat_definitions, event_log, tool_messages, tool_names

from orchestrator import Side, ToolResult, define_agent, define_hook, define_prompt, define_tool
from orchestrator.storage import ThreadBusyError
from orchestrator.storage.sqlite import SQLiteStorage
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall


# 3. a prompt as a tool
# ---------------------------------------------------------------------------


def _nested_prompt_defs(paths: list[list[str]]):
    async def probe(state: Any, args: Q) -> ToolResult:
        paths.append(list(state.execution.prompt_path))
        return ToolResult.ok(f"probe {args.q}: depth {len(state.execution.prompt_path)}")

    prompts = {
        "researcher": define_prompt(
            prompt="You research {topic} carefully.",
            tool_description="Research a question",
            tools=("probe",),
            variables={"topic": "orders"},
        ),
    }
    return chat_definitions(
        {"probe": define_tool(description="Probe", args=Q, execute=probe)}, ("researcher", "probe"), prompts=prompts
    )


async def test_prompt_as_a_tool_runs_a_nested_loop_one_level_deeper(make_runtime: Any) -> None:
    paths: list[list[str]] = []
    script = [
        R(tool_calls=[C("researcher", {"message": "Why is A1 late?"})]),  # outer a
        R(tool_calls=[C("probe", {"q": "inner"})]),  # nested researcher
        R(text="A1 waits for stock."),  # nested researcher's final text
        R(tool_calls=[C("probe", {"q": "outer"})]),  # outer a again
        R(text="It waits for stock."),  # outer a answers
    ]
    rt, model = await make_runtime(_nested_prompt_defs(paths), script)
    thread = await rt.create_thread("chat")
    result = await thread.send("Where is A1?")
    assert result.output == "It waits for stock."

    # the nested request: the nested prompt's system prompt, the call's message as user text, its own tools
    assert model.requests[1]["messages"] == [
        {"role": "system", "content": "You research orders carefully."},
        {"role": "user", "content": "Why is A1 late?"},
    ]
    assert tool_names(model.requests[1]) == ["probe"]
    assert tool_names(model.requests[0]) == ["researcher", "probe"]
    # its second request carries its own tool round, and nothing of the outer conversation
    nested2 = model.requests[2]["messages"]
    assert [m["role"] for m in nested2] == ["system", "user", "assistant", "tool"]
    assert nested2[3]["content"] == "probe inner: depth 2"
    # prompt_path grows during the nested loop and shrinks after it
    assert paths == [["pa", "researcher"], ["pa"]]

    # the outer model sees the nested final text as the tool result
    outer = model.requests[3]["messages"]
    assert [m["role"] for m in outer] == ["system", "user", "assistant", "tool"]
    assert outer[2]["tool_calls"][0]["function"]["name"] == "researcher"
    assert outer[3] == {
        "role": "tool",
        "tool_call_id": outer[2]["tool_calls"][0]["id"],
        "content": "A1 waits for stock.",
    }
    assert "probe inner" not in json.dumps(outer)  # the nested loop's messages stay at depth 1

    every = (await thread.get_messages()).messages
    nested = [m for m in every if m.depth == 1]
    assert [(m.role, m.content) for m in nested] == [
        ("user", "Why is A1 late?"),
        ("assistant", None),
        ("tool", "probe inner: depth 2"),
        ("assistant", "A1 waits for stock."),
    ]
    assert all(m.metadata.get("parent_call") == outer[2]["tool_calls"][0]["id"] for m in nested if m.role != "tool")
    top = (await thread.get_messages(max_depth=0)).messages
    assert [m.id for m in top] == [m.id for m in every if m.depth == 0] and len(top) == len(every) - 4
    assert thread.record.execution.step_count == 5  # nested steps count as steps of the execution
    events = await event_log(rt, thread)
    started = [(e.data["name"], e.data["depth"]) for e in events if e.type == "tool_call_started"]
    assert started == [("researcher", 0), ("probe", 1), ("probe", 0)]
    created = [e.data["depth"] for e in events if e.type == "message_created"]
    assert created.count(1) == 3  # the nested opening, call and answer (the result is a tool_result event)


@pytest.mark.parametrize("crash_after", ["tool", "assistant"], ids=["after-its-tool-result", "after-its-answer"])
async def test_a_prompt_as_a_tool_resumes_its_nested_loop_after_a_crash(make_runtime: Any, crash_after: str) -> None:
    """Before: a resumed execution ran the interrupted nested loop again from its start (a second
    opening, its tools run again with new idempotency keys, its steps asked of the model again).
    Now the nested loop goes on from its last stored step, like the top level."""
    paths: list[list[str]] = []
    crashed: list[str] = []

    def crash(state: Any, message: Any) -> None:
        if message.depth == 1 and message.role == crash_after and message.tool_calls is None and not crashed:
            crashed.append(message.id)
            raise Crash

    defs = _nested_prompt_defs(paths)
    defs.hooks["after_create_message"] = define_hook("after_create_message", crash).named("after_create_message")
    script = [
        R(tool_calls=[C("researcher", {"message": "Why is A1 late?"})]),  # outer a
        R(tool_calls=[C("probe", {"q": "inner"})]),  # nested researcher
        R(text="A1 waits for stock."),  # nested researcher's final text (asked after the resume, or stored before it)
        R(text="It waits for stock."),  # outer a answers
    ]
    rt, model = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    with pytest.raises(Crash):
        await thread.send("Where is A1?")
    assert (await rt.storage.get_thread(thread.id)).status == "running"

    result = await thread.send("Any news?")  # resumes the pending call first

    assert paths == [["pa", "researcher"]]  # the nested tool ran once
    nested = [m for m in (await thread.get_messages()).messages if m.depth == 1]
    assert [(m.role, m.content) for m in nested] == [
        ("user", "Why is A1 late?"),
        ("assistant", None),
        ("tool", "probe inner: depth 2"),
        ("assistant", "A1 waits for stock."),
    ]
    nested_requests = [r for r in model.requests if r["messages"][0]["content"] == "You research orders carefully."]
    assert [[m["role"] for m in r["messages"]] for r in nested_requests] == [
        ["system", "user"],
        ["system", "user", "assistant", "tool"],  # after the tool crash: the stored round, not a fresh start
    ]
    assert result.output == "It waits for stock."


# ---------------------------------------------------------------------------
# 4. an agent as a tool
# ---------------------------------------------------------------------------


class TripArgs(BaseModel):
    city: str = Field(description="Where to")
    days: int = Field(description="How long")


def _agent_tool_defs(seen: list[tuple[str, str, dict[str, Any]]]):
    async def read_args(state: Any) -> ToolResult:
        seen.append((state.thread_id, state.execution.current_side, dict(state.arguments)))
        return ToolResult.ok(f"arguments: {json.dumps(dict(state.arguments), sort_keys=True)}")

    async def finish(state: Any) -> ToolResult:
        return ToolResult.ok("finished")

    prompts = {
        "planner": define_prompt(
            prompt="Plan a trip to {city} for {days} days.", tool_description="planner", tools=("read_args",)
        ),
        "traveller": define_prompt(
            prompt="You are a traveller going to {city}.", tool_description="traveller", tools=("read_args", "finish")
        ),
    }
    agents = {
        "trip": define_agent(
            type="dual_ai",
            side_a=Side("planner"),
            side_b=Side("traveller", end_conversation_tool="finish"),
            expose_as_tool=True,
            tool_description="Plan a trip with a traveller",
            args=TripArgs,
            max_session_turns=4,
        ),
    }
    tools = {
        "read_args": define_tool(description="Read the thread's arguments", execute=read_args),
        "finish": define_tool(description="Finish", execute=finish),
    }
    return chat_definitions(tools, ("trip",), prompts=prompts, agents=agents)


async def test_agent_as_a_tool_runs_a_child_thread_with_the_call_arguments(make_runtime: Any) -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []
    script = [
        R(tool_calls=[C("trip", {"city": "Oslo", "days": 3})]),  # parent a
        R(tool_calls=[C("read_args", {})]),  # child a
        R(text="Plan: three days in Oslo."),  # child a's answer
        R(tool_calls=[C("read_args", {}), C("finish", {})]),  # child b ends the child conversation
        R(text="Your trip is planned."),  # parent a
    ]
    rt, model = await make_runtime(_agent_tool_defs(seen), script)
    thread = await rt.create_thread("chat", user_id="u1")
    events_before = len(await event_log(rt, thread))
    result = await thread.send("Plan me a trip")
    assert result.output == "Your trip is planned."

    # the tool schema comes from the agent's args model
    [spec] = model.requests[0]["tools"]
    assert spec["function"]["name"] == "trip" and set(spec["function"]["parameters"]["properties"]) == {"city", "days"}

    threads = await rt.list_threads()
    [child] = [t for t in threads if t.id != thread.id]
    assert (child.agent_id, child.parent_id, child.depth, child.user_id) == ("trip", thread.id, 1, "u1")
    assert child.arguments == {"city": "Oslo", "days": 3}
    assert child.status == "completed" and child.execution.reason == "end_conversation"

    # both child sides read the arguments from state, and see them in their prompts
    assert seen == [(child.id, "a", {"city": "Oslo", "days": 3}), (child.id, "b", {"city": "Oslo", "days": 3})]
    assert model.requests[1]["messages"][0] == {"role": "system", "content": "Plan a trip to Oslo for 3 days."}
    assert model.requests[3]["messages"][0] == {"role": "system", "content": "You are a traveller going to Oslo."}
    assert model.requests[3]["messages"][1:] == [{"role": "user", "content": "Plan: three days in Oslo."}]

    # the child's final answer is the parent's tool result
    parent_view = model.requests[4]["messages"]
    call = parent_view[2]["tool_calls"][0]
    assert parent_view[3] == {"role": "tool", "tool_call_id": call["id"], "content": "Plan: three days in Oslo."}

    # the child's messages live in the child thread, not the parent's
    child_messages = (await (await rt.get_thread(child.id)).get_messages()).messages
    assert [m.side for m in child_messages if m.role == "assistant"] == ["a", "a", "b"]
    parent_messages = (await thread.get_messages()).messages
    assert [(m.role, m.content) for m in parent_messages][-2:] == [
        ("tool", "Plan: three days in Oslo."),
        ("assistant", "Your trip is planned."),
    ]
    started = [e for e in (await event_log(rt, thread))[events_before:] if e.type == "subagent_started"]
    assert [e.data for e in started] == [{"thread_id": child.id, "agent": "trip", "call_id": call["id"]}]


# ---------------------------------------------------------------------------


async def test_invoke_tool_can_run_a_prompt_as_a_nested_loop(make_runtime: Any) -> None:
    async def ask(state: Any, args: Q) -> ToolResult:
        answer = await state.invoke_tool("expert", {"message": f"Explain {args.q}"})
        return ToolResult.ok(f"the expert says: {answer.result}")

    prompts = {"expert": define_prompt(prompt="You are an expert.", tool_description="Ask the expert")}
    defs = chat_definitions(
        {"ask": define_tool(description="Ask", args=Q, execute=ask, uses=("expert",))}, ("ask",), prompts=prompts
    )
    script = [R(tool_calls=[C("ask", {"q": "tides"})]), R(text="The moon pulls."), R(text="Tides: the moon.")]
    rt, model = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    await thread.send("why tides?")
    assert model.requests[1]["messages"] == [
        {"role": "system", "content": "You are an expert."},
        {"role": "user", "content": "Explain tides"},
    ]
    assert "tools" not in model.requests[1]
    [answer] = tool_messages(model.requests[2])
    assert answer["content"] == "the expert says: The moon pulls."
    nested = (await thread.get_messages()).messages
    assert [(m.depth, m.role, m.content) for m in nested if m.depth == 1] == [
        (1, "user", "Explain tides"),
        (1, "assistant", "The moon pulls."),
    ]


async def test_prompt_as_a_tool_that_does_not_finish_is_an_error_result(make_runtime: Any) -> None:
    async def probe(state: Any, args: Q) -> ToolResult:
        return ToolResult.ok("more")

    prompts = {"looper": define_prompt(prompt="Loop.", tool_description="Loops", tools=("probe",), max_steps=2)}
    defs = chat_definitions(
        {"probe": define_tool(description="Probe", args=Q, execute=probe)}, ("looper",), prompts=prompts
    )
    script = [
        R(tool_calls=[C("looper", {"message": "go"})]),
        R(tool_calls=[C("probe", {})]),
        R(tool_calls=[C("probe", {})]),
        R(text="gave up"),
    ]
    rt, model = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    result = await thread.send("x")
    assert result.output == "gave up" and len(model.requests) == 4
    [answer] = tool_messages(model.requests[3])
    assert answer["content"] == "prompt 'looper' did not finish within 2 steps"


@pytest.mark.parametrize("crash_at", ["child-tool", "child-last", "parent-result"])
async def test_an_agent_as_a_tool_resumes_its_child_thread_after_a_crash(make_runtime: Any, crash_at: str) -> None:
    """Before: a resumed execution ran the interrupted call again with a new child thread, from the
    start, and left the first child `running`. Now the call finds its child: a child that crashed goes
    on from its last stored step, one that had finished gives its stored answer."""
    seen: list[tuple[str, str, dict[str, Any]]] = []
    crashed: list[str] = []
    parent: list[str] = []

    def crash_on_message(state: Any, message: Any) -> None:
        child = message.thread_id != parent[0]
        hit = {
            "child-tool": message.content == "{}" or message.name == "read_args",
            "child-last": message.name == "finish",
        }
        if child and message.role == "tool" and hit.get(crash_at) and not crashed:
            crashed.append(message.id)
            raise Crash

    def crash_on_result(state: Any, call: Any, result: Any) -> None:
        if crash_at == "parent-result" and state.thread_id == parent[0] and call.name == "trip" and not crashed:
            crashed.append(call.id)
            raise Crash

    defs = _agent_tool_defs(seen)
    defs.hooks["after_create_message"] = define_hook("after_create_message", crash_on_message).named(
        "after_create_message"
    )
    defs.hooks["before_store_tool_result"] = define_hook("before_store_tool_result", crash_on_result).named(
        "before_store_tool_result"
    )
    script = [
        R(tool_calls=[C("trip", {"city": "Oslo", "days": 3})]),  # parent a
        R(tool_calls=[C("read_args", {})]),  # child a
        R(text="Plan: three days in Oslo."),  # child a's answer
        R(tool_calls=[C("read_args", {}), C("finish", {})]),  # child b ends the child conversation
        R(text="Your trip is planned."),  # parent a, after the resume
    ]
    rt, model = await make_runtime(defs, script)
    thread = await rt.create_thread("chat", user_id="u1")
    parent.append(thread.id)
    with pytest.raises(Crash):
        await thread.send("Plan me a trip")
    assert crashed

    result = await thread.send("Is it done?")  # resumes the pending call first

    assert result.output == "Your trip is planned." and len(model.requests) == 5
    [child] = [t for t in await rt.list_threads() if t.id != thread.id]  # one child thread, not a second
    assert child.status == "completed" and child.execution.reason == "end_conversation"
    assert [side for _, side, _ in seen] == ["a", "b"]  # each child side's tool ran once
    child_messages = (await (await rt.get_thread(child.id)).get_messages()).messages
    assert [m.side for m in child_messages if m.role == "assistant"] == ["a", "a", "b"]
    [trip] = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert trip.content == "Plan: three days in Oslo."


async def test_ai_human_agent_as_a_tool_gets_the_message_as_the_persons_turn(make_runtime: Any) -> None:
    prompts = {"helper_p": define_prompt(prompt="You help.", tool_description="helper")}
    agents = {
        "helper": define_agent(
            type="ai_human", side_a=Side("helper_p"), expose_as_tool=True, tool_description="Ask the helper"
        )
    }
    defs = chat_definitions({}, ("helper",), prompts=prompts, agents=agents)
    script = [R(tool_calls=[C("helper", {"message": "Summarise order A1"})]), R(text="A1: shipped."), R(text="Done.")]
    rt, model = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    await thread.send("x")
    assert model.requests[1]["messages"] == [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "Summarise order A1"},
    ]
    [answer] = tool_messages(model.requests[2])
    assert answer["content"] == "A1: shipped."
    [child] = [t for t in await rt.list_threads() if t.parent_id == thread.id]
    assert child.arguments == {"message": "Summarise order A1"} and child.status == "idle"
    child_messages = (await (await rt.get_thread(child.id)).get_messages()).messages
    assert [(m.side, m.role, m.content) for m in child_messages] == [
        ("b", "user", "Summarise order A1"),
        ("a", "assistant", "A1: shipped."),
    ]


@pytest.mark.parametrize("held_for", ["part of a ttl", "past a ttl", "stopped while waiting"])
async def test_a_resumed_agent_call_waits_out_its_childs_lease(
    make_runtime: Any, tmp_path: Path, held_for: str
) -> None:
    """The child's lease was taken after its parent's, so a worker resuming the parent can find the
    child still leased by the worker that died (on another host: its TTL must be waited out). Before,
    the call's result was the `ThreadBusyError` and the child's work was lost to the model; now the
    call waits, on the lease clock, and resumes the child."""
    seen: list[tuple[str, str, dict[str, Any]]] = []
    now = [1000.0]
    waits: list[float] = []
    crashed: list[str] = []
    parent: list[str] = []

    def crash_in_child(state: Any, message: Any) -> None:
        if message.role == "tool" and message.name == "read_args" and message.thread_id != parent[0] and not crashed:
            crashed.append(message.id)
            raise Crash

    waiting = asyncio.Event()

    async def lease_clock(seconds: float) -> None:
        if seconds == rt.settings.lease_ttl / 3:  # the heartbeat's interval: no renewal is needed here
            await asyncio.Event().wait()
        waits.append(seconds)
        if held_for == "stopped while waiting":
            waiting.set()
            await asyncio.Event().wait()  # until the stop cancels the call
        now[0] += seconds

    defs = _agent_tool_defs(seen)
    defs.hooks["after_create_message"] = define_hook("after_create_message", crash_in_child).named(
        "after_create_message"
    )
    script = [
        R(tool_calls=[C("trip", {"city": "Oslo", "days": 3})]),
        R(tool_calls=[C("read_args", {})]),
        R(text="Plan: three days in Oslo."),
        R(tool_calls=[C("finish", {})]),
        R(text="Your trip is planned."),
    ]
    storage = SQLiteStorage(str(tmp_path / "leases.db"), clock=lambda: now[0])
    rt, model = await make_runtime(defs, script, storage=storage)
    rt.services.heartbeat.sleep = lease_clock
    thread = await rt.create_thread("chat", user_id="u1")
    parent.append(thread.id)
    with pytest.raises(Crash):
        await thread.send("Plan me a trip")
    [child] = [t for t in await rt.list_threads() if t.id != thread.id]
    held = rt.settings.lease_ttl + (5 if held_for == "past a ttl" else -2)
    await rt.storage.acquire_lease(child.id, "another-host~1:4242:0badf00d/exec_1", held)
    if held_for == "past a ttl":  # running elsewhere, as far as anyone can tell: the parent stays resumable
        with pytest.raises(ThreadBusyError, match="is busy"):
            await thread.send("Is it done?")
        assert waits == [] and (await rt.storage.get_thread(thread.id)).status == "running"
        return

    if held_for == "stopped while waiting":  # the stop reaches the wait: no lease's worth of waiting first
        sending = asyncio.create_task(thread.send("Is it done?"))
        await asyncio.wait_for(waiting.wait(), 30)
        assert thread.stop()
        stopped = await asyncio.wait_for(sending, 30)
        assert stopped.reason == "stopped" and stopped.stopped_by == "caller"
        assert not [m for m in (await thread.get_messages()).messages if m.role == "tool"]
        return

    result = await thread.send("Is it done?")

    assert waits == [pytest.approx(rt.settings.lease_ttl - 2)]
    [trip] = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert trip.content == "Plan: three days in Oslo." and result.output == "Your trip is planned."
    assert (await rt.storage.get_thread(child.id)).status == "completed"
