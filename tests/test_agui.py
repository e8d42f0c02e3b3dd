"""The AG-UI endpoint (`POST /ag-ui/...`) through the app, and the event translation on its own.

The official JavaScript client drives the same endpoint over a real socket in tests/test_agui_client.py;
these tests pin what the stream says and what the endpoint refuses, each on exact events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from ag_ui.core import Event as AguiEvent
from pydantic import BaseModel, TypeAdapter
from support import definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.event_types import parse_event
from orchestrator.server.agui_events import AguiTranslator
from orchestrator.server.app import create_app
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
TOKENS = {"token-alice": "alice", "token-bob": "bob"}
ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}
EVENTS: TypeAdapter[Any] = TypeAdapter(AguiEvent)


class CityArgs(BaseModel):
    city: str


async def _weather(state: Any, args: CityArgs) -> ToolResult:
    state.emit("weather_looked_up", {"city": args.city})
    seen = await state.get_value("cities") or []
    await state.set_value("cities", [*seen, args.city])
    return ToolResult.ok(f"sunny in {args.city}")


def agui_defs() -> Any:
    return definitions(
        tools={"weather": define_tool(description="The weather in a city", args=CityArgs, execute=_weather)},
        prompts={"helper": define_prompt(prompt="You help.", tool_description="helper", tools=("weather",))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("helper"))},
    )


SCRIPT = [R(text="Let me look.", tool_calls=[C("weather", {"city": "Oslo"})]), R(text="It is sunny in Oslo.")]


@pytest.fixture
async def api(make_runtime: Any) -> AsyncIterator[Any]:
    clients: list[httpx.AsyncClient] = []

    async def factory(script: Any = SCRIPT) -> tuple[httpx.AsyncClient, Any]:
        runtime, _ = await make_runtime(agui_defs(), script)
        app = create_app(runtime, tokens=TOKENS)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        clients.append(client)
        return client, runtime

    yield factory
    for client in clients:
        await client.aclose()


def run_input(thread_id: str = "thread-1", text: str = "Weather in Oslo?", **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "run-1",
        "messages": [{"id": "m1", "role": "user", "content": text}],
        **extra,
    }


def sse_events(body: str) -> list[dict[str, Any]]:
    """The `data:` frames of an SSE body, each checked against the protocol's own event models."""
    frames = [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]
    events = [json.loads(frame) for frame in frames]
    for event in events:
        EVENTS.validate_python(event)
    return events


async def test_a_run_streams_text_tool_call_state_and_custom_events_in_order(api: Any) -> None:
    client, runtime = await api()
    body = run_input(state={"cities": []})
    res = await client.post("/ag-ui/chat", json=body, headers=ALICE)
    assert res.status_code == 200, res.text
    assert res.headers["content-type"].startswith("text/event-stream")
    events = sse_events(res.text)
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM"]  # the turn's start, as our own custom event
    assert events[0]["threadId"] == "thread-1" and events[0]["runId"] == "run-1"
    assert events[1]["snapshot"] == {"cities": []}
    core = [k for i, k in enumerate(kinds) if k != "CUSTOM" and not (k == "TEXT_MESSAGE_CONTENT" == kinds[i - 1])]
    assert core == [  # each run of TEXT_MESSAGE_CONTENT counted once
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STATE_DELTA",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    texts = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert texts == "Let me look.It is sunny in Oslo."
    call = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert call["toolCallName"] == "weather"
    assert json.loads(next(e for e in events if e["type"] == "TOOL_CALL_ARGS")["delta"]) == {"city": "Oslo"}
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == call["toolCallId"] and result["content"] == "sunny in Oslo"
    delta = next(e for e in events if e["type"] == "STATE_DELTA")
    assert delta["delta"] == [{"op": "replace", "path": "/cities", "value": ["Oslo"]}]
    customs = {e["name"]: e["value"] for e in events if e["type"] == "CUSTOM"}
    assert customs["weather_looked_up"] == {"city": "Oslo"}  # the tool's own event keeps its name
    assert customs["orchestrator.turn_ended"] == {"side": "a", "reason": "response"}
    finished = events[-1]
    assert finished["outcome"] == {"type": "success"} and finished["result"]["reason"] == "rest"
    thread = await runtime.get_thread("thread-1")
    assert thread.record.user_id == "alice" and thread.record.agent_id == "chat"
    assert await thread.state.get_value("cities") == ["Oslo"]


async def test_the_next_run_continues_the_same_thread(api: Any) -> None:
    client, runtime = await api([R(text="One."), R(text="Two.")])
    first = await client.post("/ag-ui/chat", json=run_input(text="first"), headers=ALICE)
    assert sse_events(first.text)[-1]["type"] == "RUN_FINISHED"
    history = [{"id": "m1", "role": "user", "content": "first"}, {"id": "a1", "role": "assistant", "content": "One."}]
    body = {**run_input(), "messages": [*history, {"id": "m2", "role": "user", "content": "second"}]}
    second = await client.post("/ag-ui/threads/thread-1", json=body, headers=ALICE)
    events = sse_events(second.text)
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Two."
    messages = (await (await runtime.get_thread("thread-1")).get_messages()).messages
    assert [(m.role, m.content) for m in messages] == [
        ("user", "first"),
        ("assistant", "One."),
        ("user", "second"),
        ("assistant", "Two."),
    ]


def _error(res: httpx.Response, status: int, code: str, field: str | None = None) -> None:
    assert res.status_code == status, res.text
    error = res.json()["error"]
    assert error["code"] == code, error
    if field is not None:
        assert error["field"] == field, error


async def test_refusals_name_the_field(api: Any) -> None:
    client, _ = await api()
    _error(await client.post("/ag-ui/chat", json=run_input()), 401, "unauthorized")
    _error(await client.post("/ag-ui/nobody", json=run_input(), headers=ALICE), 404, "unknown_agent", "path.agent")
    _error(await client.post("/ag-ui/chat", json={"threadId": "t"}, headers=ALICE), 422, "invalid_request")
    bad_id = run_input(thread_id="../etc")
    _error(await client.post("/ag-ui/chat", json=bad_id, headers=ALICE), 422, "invalid_request", "body.threadId")
    tools = run_input(tools=[{"name": "confirm", "description": "Ask the person", "parameters": {}}])
    _error(await client.post("/ag-ui/chat", json=tools, headers=ALICE), 422, "frontend_tools_unsupported", "body.tools")
    not_object = run_input(state=[1, 2])
    _error(await client.post("/ag-ui/chat", json=not_object, headers=ALICE), 422, "invalid_state", "body.state")
    no_user = {**run_input(), "messages": []}
    _error(await client.post("/ag-ui/chat", json=no_user, headers=ALICE), 422, "invalid_request", "body.messages")
    other = run_input(thread_id="thread-9")
    _error(await client.post("/ag-ui/threads/thread-1", json=other, headers=ALICE), 422, "invalid_request")


async def test_reasoning_is_bracketed_and_closed_before_text() -> None:
    """Reasoning deltas open REASONING_START / REASONING_MESSAGE_START once; the first text delta closes them."""
    translator = AguiTranslator("t", "r")
    frames = [
        {"type": "step_started", "data": {"side": "a", "step": 1, "model": "m"}},
        {"type": "reasoning_delta", "data": {"side": "a", "depth": 0, "text": "think"}},
        {"type": "reasoning_delta", "data": {"side": "a", "depth": 0, "text": "ing"}},
        {"type": "text_delta", "data": {"side": "a", "depth": 0, "text": "Hi"}},
        {"type": "text_delta", "data": {"side": "a", "depth": 1, "text": "nested, not streamed"}},
        {"type": "execution_stopped", "data": {"flow_id": "f", "reason": "stopped by user", "stopped_by": "caller"}},
    ]
    out = []
    for seq, frame in enumerate(frames, 1):
        out += translator.translate(parse_event({"thread_id": "t", "seq": seq, "at": 0.0, **frame}))
    kinds = [e.type.value for e in out]
    assert kinds == [
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert out[-1].model_dump(mode="json", by_alias=True)["outcome"] == {"type": "cancelled"}
    late = parse_event({"thread_id": "t", "seq": 9, "at": 0.0, **frames[3]})
    assert translator.ended and translator.translate(late) == []
