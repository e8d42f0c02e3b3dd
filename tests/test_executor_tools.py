"""Tools calling tools (queued and invoked, also after a crash) and required variables, end to end;
prompts and agents called as tools are in tests/test_nested_calls.py. LiteLLM builds the requests;
the runtime's OpenAI-wire reader reads the scripted model's streams.

Each test drives the real loop on a scripted model served by respx and checks
what the model received (`model.requests`: the JSON bodies LiteLLM sent),
what storage kept, and which events were published.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support import Crash, Q, chat_definitions, event_log, tool_messages, tool_names

from orchestrator import ToolResult, define_hook, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.definitions.define import VariableDefinition
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
ROOT = Path(__file__).resolve().parent.parent


class Note(BaseModel):
    text: str = ""


def _kinds(messages: list[Any]) -> list[tuple[str, str | None]]:
    """Each message's role and the tool it answers or calls (its first call)."""
    return [(m.role, m.name or (m.tool_calls[0].name if m.tool_calls else None)) for m in messages]


# ---------------------------------------------------------------------------
# 1. queue_tool
# ---------------------------------------------------------------------------


def _queue_defs(log: list[str]):
    async def ship(state: Any, args: Q) -> ToolResult:
        log.append("ship:start")
        state.queue_tool("notify", {"text": f"shipped {args.q}"})
        log.append("ship:end")
        return ToolResult.ok(f"order {args.q} shipped")

    async def notify(state: Any, args: Note) -> ToolResult:
        log.append(f"notify:{args.text}")
        return ToolResult.ok(f"notified: {args.text}")

    async def sneaky(state: Any, args: Q) -> ToolResult:
        state.queue_tool("notify", {"text": "not allowed"})
        return ToolResult.ok("unreachable")

    tools = {
        "ship": define_tool(description="Ship an order", args=Q, execute=ship, uses=("notify",)),
        "notify": define_tool(description="Notify the customer", args=Note, execute=notify),
        "sneaky": define_tool(description="Queues what it may not", args=Q, execute=sneaky),
    }
    return chat_definitions(tools, ("ship", "sneaky"))


async def test_queue_tool_runs_after_the_tool_and_is_shown_as_a_call_of_the_same_message(make_runtime: Any) -> None:
    log: list[str] = []
    script = [R(tool_calls=[C("ship", {"q": "A1"})]), R(text="Shipped and notified.")]
    rt, model = await make_runtime(_queue_defs(log), script)
    thread = await rt.create_thread("chat")
    result = await thread.send("ship A1 please")

    assert result.output == "Shipped and notified."
    assert log == ["ship:start", "ship:end", "notify:shipped A1"]  # after the queuing tool returned
    # the queued tool is not offered to the model: only its caller's `uses` allow it
    assert tool_names(model.requests[0]) == ["ship", "sneaky"]

    # the next request: one assistant message with both calls, each answer right after it
    view = model.requests[1]["messages"]
    assert [m["role"] for m in view] == ["system", "user", "assistant", "tool", "tool"]
    assistant = view[2]
    assert assistant["role"] == "assistant"
    calls = assistant["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["ship", "notify"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"text": "shipped A1"}
    assert view[3:] == [
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "order A1 shipped"},
        {"role": "tool", "tool_call_id": calls[1]["id"], "content": "notified: shipped A1"},
    ]

    # storage: the queued call is its own assistant message, tied to its parent call
    stored = (await thread.get_messages()).messages
    assert _kinds(stored) == [
        ("user", None),
        ("assistant", "ship"),
        ("tool", "ship"),
        ("assistant", "notify"),
        ("tool", "notify"),
        ("assistant", None),
    ]
    announce = stored[3]
    assert announce.metadata == {"queued_by": calls[0]["id"]} and announce.side == "a"
    assert stored[4].tool_call_id == announce.tool_calls[0].id == calls[1]["id"]
    assert stored[4].tool_status == "success"

    events = await event_log(rt, thread)
    results = [e.data["name"] for e in events if e.type == "tool_result"]
    assert results == ["ship", "notify"]


@pytest.mark.parametrize("crash_at", ["before-it-runs", "while-it-runs"])
async def test_a_queued_tool_runs_after_a_crash_that_interrupted_its_queue(make_runtime: Any, crash_at: str) -> None:
    """Before: the queue lived in memory only. A crash after the queuing tool's result was stored and
    before the queued tool ran lost it for good: the resumed execution had nothing to run. Now the
    result keeps what its call queued, each queued call is stored before it runs, and a resume runs
    what is left (a call interrupted while it ran runs again, with the same id)."""
    log: list[str] = []
    crashed: list[str] = []
    defs = _queue_defs(log)
    notify = defs.tools["notify"].execute

    async def crashing_notify(state: Any, args: Note) -> ToolResult:
        if crash_at == "while-it-runs" and not crashed:
            crashed.append("notify")
            raise Crash
        result: ToolResult = await notify(state, args)
        return result

    def crash_after_ship(state: Any, call: Any, result: Any) -> None:
        if crash_at == "before-it-runs" and call.name == "ship" and not crashed:
            crashed.append("ship")
            raise Crash

    defs.tools["notify"] = define_tool(description="Notify", args=Note, execute=crashing_notify).named("notify")
    hook = define_hook("after_tool_call_success", crash_after_ship).named("after_tool_call_success")
    defs.hooks["after_tool_call_success"] = hook
    rt, model = await make_runtime(defs, [R(tool_calls=[C("ship", {"q": "A1"})]), R(text="Shipped and notified.")])
    thread = await rt.create_thread("chat")
    with pytest.raises(Crash):
        await thread.send("ship A1 please")

    result = await thread.send("done?")  # resumes first

    assert result.output == "Shipped and notified." and len(model.requests) == 2
    assert log == ["ship:start", "ship:end", "notify:shipped A1"]
    stored = (await thread.get_messages()).messages
    assert _kinds(stored) == [
        ("user", None),
        ("assistant", "ship"),
        ("tool", "ship"),
        ("assistant", "notify"),
        ("tool", "notify"),
        ("user", None),
        ("assistant", None),
    ]
    assert stored[4].tool_call_id == stored[3].tool_calls[0].id and stored[4].content == "notified: shipped A1"


async def test_queue_tool_outside_uses_is_an_error_result_naming_the_rule(make_runtime: Any) -> None:
    log: list[str] = []
    script = [R(tool_calls=[C("sneaky", {"q": "x"})]), R(text="ok")]
    rt, model = await make_runtime(_queue_defs(log), script)
    thread = await rt.create_thread("chat")
    await thread.send("go")

    [answer] = tool_messages(model.requests[1])
    assert (
        answer["content"] == "queue_tool: tool 'sneaky' may not call 'notify'; add it to the tool's uses (now: empty)"
    )
    assert log == []  # nothing was queued, nothing ran
    stored = (await thread.get_messages()).messages
    assert [m.tool_status for m in stored if m.role == "tool"] == ["error"]
    assert not [m for m in stored if m.metadata.get("queued_by")]


# ---------------------------------------------------------------------------
# 2. invoke_tool
# ---------------------------------------------------------------------------


def _invoke_defs():
    async def outer(state: Any, args: Q) -> ToolResult:
        inner_result = await state.invoke_tool("inner", {"q": args.q.upper()})
        return ToolResult.ok(f"outer used [{inner_result.result}] ({inner_result.status})")

    async def inner(state: Any, args: Q) -> ToolResult:
        return ToolResult.ok(f"inner saw {args.q}")

    async def rogue(state: Any, args: Q) -> ToolResult:
        await state.invoke_tool("inner", {"q": "x"})
        return ToolResult.ok("unreachable")

    async def ping(state: Any, args: Q) -> ToolResult:
        return await state.invoke_tool("pong", {"q": args.q})

    async def pong(state: Any, args: Q) -> ToolResult:
        return await state.invoke_tool("ping", {"q": args.q})

    tools = {
        "outer": define_tool(description="Uses inner", args=Q, execute=outer, uses=("inner",)),
        "inner": define_tool(description="Inner", args=Q, execute=inner),
        "rogue": define_tool(description="Invokes what it may not", args=Q, execute=rogue),
        "ping": define_tool(description="Ping", args=Q, execute=ping, uses=("pong",)),
        "pong": define_tool(description="Pong", args=Q, execute=pong, uses=("ping",)),
    }
    return chat_definitions(tools, ("outer", "rogue", "ping"))


async def test_invoke_tool_returns_the_result_to_the_caller(make_runtime: Any) -> None:
    rt, model = await make_runtime(_invoke_defs(), [R(tool_calls=[C("outer", {"q": "abc"})]), R(text="done")])
    thread = await rt.create_thread("chat")
    await thread.send("go")
    [answer] = tool_messages(model.requests[1])
    assert answer["content"] == "outer used [inner saw ABC] (success)"
    # an invoked tool's result is the caller's business: nothing of it is stored on its own
    stored = (await thread.get_messages()).messages
    assert [(m.role, m.name) for m in stored if m.role == "tool"] == [("tool", "outer")]
    assert all(c.name == "outer" for m in stored for c in m.tool_calls or [])


async def test_invoke_tool_outside_uses_and_cycles_are_clear_errors(make_runtime: Any) -> None:
    script = [R(tool_calls=[C("rogue", {}), C("ping", {"q": "1"})]), R(text="done")]
    rt, model = await make_runtime(_invoke_defs(), script)
    thread = await rt.create_thread("chat")
    await thread.send("go")
    rogue, ping = tool_messages(model.requests[1])
    assert rogue["content"] == "invoke_tool: tool 'rogue' may not call 'inner'; add it to the tool's uses (now: empty)"
    assert ping["content"] == "invoke_tool cycle: ping -> pong -> ping"
    stored = (await thread.get_messages()).messages
    assert [m.tool_status for m in stored if m.role == "tool"] == ["error", "error"]


# ---------------------------------------------------------------------------
# 5. required env variables
# ---------------------------------------------------------------------------

VAR = "ORCH_TEST_TOOLS_API_TOKEN"


def _variable_defs(tokens: list[str]):
    async def call_api(state: Any, args: Q) -> ToolResult:
        token = await state.env(VAR)
        tokens.append(token)
        return ToolResult.ok(f"called with a {len(token)}-character token")

    tool = define_tool(
        description="Call the API",
        args=Q,
        execute=call_api,
        variables=(VariableDefinition(name=VAR, description="API token for the order service", scope="thread"),),
    )
    return chat_definitions({"call_api": tool}, ("call_api",))


async def test_missing_required_variable_is_an_error_result_then_thread_env_lets_it_run(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VAR, raising=False)
    tokens: list[str] = []
    script = [
        R(tool_calls=[C("call_api", {})]),
        R(text="no token"),
        R(tool_calls=[C("call_api", {})]),
        R(text="worked"),
    ]
    rt, model = await make_runtime(_variable_defs(tokens), script)
    thread = await rt.create_thread("chat")

    await thread.send("call it")
    [answer] = tool_messages(model.requests[1])
    assert (
        answer["content"]
        == f"Tool 'call_api' needs env value {VAR!r} (API token for the order service), which is not set"
    )
    assert tokens == []  # the tool never ran

    await thread.state.set_env(VAR, "tok-123456", "secret")
    assert (await rt.storage.get_env("thread", thread.id, VAR)).value == "tok-123456"
    await thread.send("again")
    answers = tool_messages(model.requests[3])
    assert answers[-1]["content"] == "called with a 10-character token"
    assert tokens == ["tok-123456"]
    stored = (await thread.get_messages()).messages
    assert [m.tool_status for m in stored if m.role == "tool"] == ["error", "success"]
    assert "tok-123456" not in json.dumps(model.requests)  # a secret never reaches the model


# ---------------------------------------------------------------------------
# edges of the above
# ---------------------------------------------------------------------------


async def test_queued_tools_that_queue_more_are_bounded_per_step(make_runtime: Any) -> None:
    ran: list[str] = []

    async def chain(state: Any, args: Q) -> ToolResult:
        ran.append(args.q)
        state.queue_tool("chain", {"q": args.q + "+"})
        return ToolResult.ok(f"chain {args.q}")

    defs = chat_definitions(
        {"chain": define_tool(description="Queues itself", args=Q, execute=chain, uses=("chain",))}, ("chain",)
    )
    script = [R(tool_calls=[C("chain", {"q": "x"})]), R(text="stopped")]
    rt, model = await make_runtime(defs, script, settings=RuntimeSettings(max_queued_tools=2))
    thread = await rt.create_thread("chat")
    await thread.send("go")

    assert ran == ["x", "x+", "x++"]  # the call, then two queued runs
    view = model.requests[1]["messages"]
    calls = view[2]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"q": "x"},
        {"q": "x+"},
        {"q": "x++"},
        {"q": "x+++"},
    ]
    answers = view[3:]
    assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
    assert [a["content"] for a in answers] == [
        "chain x",
        "chain x+",
        "chain x++",
        "queue limit reached: at most 2 queued tools run per step; 'chain' was not run",
    ]


async def test_optional_variable_missing_does_not_block_the_tool(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VAR, raising=False)

    async def maybe(state: Any, args: Q) -> ToolResult:
        return ToolResult.ok("ran without it")

    tool = define_tool(
        description="Maybe", args=Q, execute=maybe, variables=(VariableDefinition(name=VAR, required=False),)
    )
    rt, model = await make_runtime(
        chat_definitions({"maybe": tool}, ("maybe",)), [R(tool_calls=[C("maybe", {})]), R(text="ok")]
    )
    await (await rt.create_thread("chat")).send("go")
    assert tool_messages(model.requests[1])[0]["content"] == "ran without it"
