"""AG-UI frontend tools (`RunAgentInput.tools`): offered to the model, their calls handed to the client, the
client's results resuming the run, all on the deferred-result mechanism (engine/client_tools.py).

On recorded wire bytes of OpenAI, Anthropic and Gemini (the scripted model speaks each): the request after
the pause must pair every call with its result in the provider's own form.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from test_agui import ALICE, TOKENS, agui_defs, run_input, sse_events
from test_waiting_calls import WIRES

from orchestrator.server.app import create_app
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
CONFIRM = {
    "name": "confirm",
    "description": "Ask the person to confirm a booking",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
}
SCRIPT = [
    R(text="Checking.", tool_calls=[C("weather", {"city": "Oslo"}), C("confirm", {"question": "Book Oslo?"})]),
    R(text="Booked Oslo."),
]


@pytest.fixture
async def api(make_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    monkeypatch.setenv("WAITING_TEST_KEY", "k-waiting-test-0123456789")
    clients: list[httpx.AsyncClient] = []

    async def factory(wire: str, script: Any = SCRIPT) -> tuple[httpx.AsyncClient, Any, ScriptedModel]:
        runtime, model = await make_runtime(agui_defs(), script, wire=wire, config=WIRES[wire])
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(runtime, tokens=TOKENS)), base_url="http://t"
        )
        clients.append(client)
        return client, runtime, model

    yield factory
    for client in clients:
        await client.aclose()


def _tool_names(request: dict[str, Any], wire: str) -> set[str]:
    if wire == "gemini":
        return {f["name"] for t in request.get("tools", []) for f in t.get("function_declarations", [])}
    if wire == "anthropic":
        return {t["name"] for t in request.get("tools", [])}
    return {t["function"]["name"] for t in request.get("tools", [])}


@pytest.mark.parametrize("wire", ["openai", "anthropic", "gemini"])
async def test_a_frontend_tool_call_ends_the_run_and_the_clients_result_resumes_it(api: Any, wire: str) -> None:
    client, runtime, model = await api(wire)
    first = await client.post("/ag-ui/chat", json=run_input(tools=[CONFIRM]), headers=ALICE)
    assert first.status_code == 200, first.text
    events = sse_events(first.text)
    assert _tool_names(model.requests[0], wire) == {"weather", "slow_lookup", "confirm"}
    starts = {e["toolCallName"]: e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"}
    confirm_id = starts["confirm"]
    args = [e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS" and e["toolCallId"] == confirm_id]
    assert [a.replace(" ", "") for a in args] == ['{"question":"BookOslo?"}']
    results = [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [starts["weather"]]  # the server's tool ran; the frontend's waits for the client
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"]["pendingToolCallIds"] == [confirm_id]
    thread = await runtime.get_thread("thread-1")
    assert [(c.call_id, c.kind, c.tool) for c in await thread.waiting_calls()] == [(confirm_id, "result", "confirm")]

    second = {
        **run_input(tools=[CONFIRM]),
        "runId": "run-2",
        "messages": [
            {"id": "m1", "role": "user", "content": "Weather in Oslo?"},
            {"id": "t1", "role": "tool", "toolCallId": confirm_id, "content": "yes, book it"},
        ],
    }
    res = await client.post("/ag-ui/chat", json=second, headers=ALICE)
    assert res.status_code == 200, res.text
    events = sse_events(res.text)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["yes, book it"]
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Booked Oslo."
    assert len(model.requests) == 2 and "yes, book it" in str(model.requests[1])
    assert _tool_names(model.requests[1], wire) == {"weather", "slow_lookup", "confirm"}
    assert (await thread.refresh()).status != "waiting"

    again = await client.post("/ag-ui/chat", json={**second, "runId": "run-3"}, headers=ALICE)
    assert again.status_code == 422 and again.json()["error"]["code"] == "unexpected_tool_result"
    assert len(model.requests) == 2  # answered once: no second resume


async def test_a_new_message_while_a_frontend_call_waits_is_refused(api: Any) -> None:
    client, runtime, model = await api("openai")
    await client.post("/ag-ui/chat", json=run_input(tools=[CONFIRM]), headers=ALICE)
    res = await client.post("/ag-ui/chat", json=run_input(text="hello?", tools=[CONFIRM]), headers=ALICE)
    assert res.status_code == 409 and res.json()["error"]["code"] == "thread_waiting"
    assert len(model.requests) == 1


async def test_frontend_tools_are_checked(api: Any) -> None:
    client, _, model = await api("openai")
    cases = [
        ([{**CONFIRM, "name": "bad name"}], "body.tools[0].name"),
        ([CONFIRM, CONFIRM], "body.tools[1].name"),
        ([{**CONFIRM, "parameters": {"type": "string"}}], "body.tools[0].parameters"),
        ([{**CONFIRM, "parameters": {"type": "object", "properties": 3}}], "body.tools[0].parameters"),
        ([{**CONFIRM, "name": f"t{i}"} for i in range(51)], "body.tools"),
    ]
    for tools, field in cases:
        res = await client.post("/ag-ui/chat", json=run_input(tools=tools), headers=ALICE)
        assert res.status_code == 422, res.text
        assert res.json()["error"]["code"] == "invalid_tools" and res.json()["error"]["field"] == field
    assert model.requests == []


async def test_a_frontend_tool_named_like_a_server_tool_is_refused(api: Any) -> None:
    client, _, model = await api("openai")
    res = await client.post("/ag-ui/chat", json=run_input(tools=[{**CONFIRM, "name": "weather"}]), headers=ALICE)
    assert res.status_code == 422 and res.json()["error"]["field"] == "body.tools[0].name"
    assert "weather" in res.json()["error"]["message"] and model.requests == []
