"""The per-thread WebSocket on a real uvicorn server in the test's event loop."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import BaseModel
from support import definitions
from test_server_api import ALICE, BOB, TOKENS, EndArgs, LookupArgs, _end, _lookup
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.server.app import create_app
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
GATE: dict[str, asyncio.Event] = {}


class NoArgs(BaseModel):
    pass


async def _wait_gate(state: Any, args: NoArgs) -> ToolResult:
    GATE["entered"].set()
    await GATE["open"].wait()
    return ToolResult(status="success", result="gate passed")


def ws_defs() -> Any:
    return definitions(
        tools={
            "lookup_order": define_tool(
                description="Look up an order", args=LookupArgs, execute=_lookup, progress_argument="order_id"
            ),
            "end_chat": define_tool(description="End the chat", args=EndArgs, execute=_end),
            "wait_gate": define_tool(description="Wait", args=NoArgs, execute=_wait_gate),
        },
        prompts={
            "agent_p": define_prompt(
                prompt="You are support.", tool_description="support", tools=("lookup_order", "wait_gate")
            ),
            "customer_p": define_prompt(prompt="You are a customer.", tool_description="customer", tools=("end_chat",)),
        },
        agents={
            "demo": define_agent(
                type="dual_ai",
                side_a=Side("agent_p", max_steps=4),
                side_b=Side("customer_p", end_conversation_tool="end_chat"),
                max_session_turns=6,
            )
        },
    )


CONVERSATION = [
    R(text="Hello, how can I help?"),
    R(text="Where is order 42?"),
    R(tool_calls=[C("lookup_order", {"order_id": "42"})]),
    R(text="Order 42 has shipped."),
    R(tool_calls=[C("end_chat", {"reason": "done"})], text="Thanks!"),
]
GATED = [
    R(text="One moment please.", tool_calls=[C("wait_gate", {})]),
    R(text="Done waiting, here is your answer."),
    R(tool_calls=[C("end_chat", {"reason": "done"})]),
]


class Live:
    def __init__(self, app: Any, port: int) -> None:
        self.app = app
        self.ws = f"ws://127.0.0.1:{port}"
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")

    async def thread(self) -> str:
        res = await self.http.post("/threads", json={"agent": "demo"}, headers=ALICE)
        assert res.status_code == 201
        return res.json()["id"]

    def events(self, tid: str, after: int = 0, headers: dict[str, str] = ALICE, **options: Any) -> Any:
        return connect(
            f"{self.ws}/threads/{tid}/events?after={after}", additional_headers=headers, open_timeout=10, **options
        )


@pytest.fixture
async def live(make_runtime: Any) -> AsyncIterator[Any]:
    started: list[tuple[uvicorn.Server, asyncio.Task[None], Live]] = []
    GATE["open"], GATE["entered"] = asyncio.Event(), asyncio.Event()

    async def factory(script: Any) -> Live:
        runtime, _ = await make_runtime(ws_defs(), script)
        app = create_app(runtime, tokens=TOKENS)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        live = Live(app, sock.getsockname()[1])
        started.append((server, task, live))
        return live

    yield factory
    GATE["open"].set()
    for server, task, live in started:
        await live.http.aclose()
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def read_until(
    ws: ClientConnection, *, type: str | None = None, pred: Any = None, timeout: float = 15
) -> list[dict[str, Any]]:
    """Events up to and including the first of `type` (or matching `pred`)."""
    got: list[dict[str, Any]] = []

    async def loop() -> None:
        while True:
            event = json.loads(await ws.recv())
            got.append(event)
            if (type is not None and event["type"] == type) or (pred is not None and pred(event)):
                return

    await asyncio.wait_for(loop(), timeout)
    return got


def _contiguous(events: list[dict[str, Any]]) -> None:
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


async def test_stream_carries_every_kind_of_event(live: Any) -> None:
    srv = await live(CONVERSATION)
    tid = await srv.thread()
    async with srv.events(tid) as ws:
        assert (await srv.http.post(f"/threads/{tid}/run", headers=ALICE)).status_code == 202
        events = await read_until(ws, type="execution_stopped")
    _contiguous(events)
    assert events[0]["type"] == "thread_created" and events[0]["seq"] == 1
    types = [e["type"] for e in events]
    for kind in [
        "execution_started",
        "turn_started",
        "step_started",
        "text_delta",
        "message_created",
        "tool_call_started",
        "tool_result",
        "turn_ended",
        "execution_stopped",
        "order_looked_up",
    ]:
        assert kind in types, kind
    started = next(e for e in events if e["type"] == "tool_call_started")
    assert started["data"]["name"] == "lookup_order" and started["data"]["progress_value"] == "42"
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["data"]["content"] == "Order 42: shipped" and result["data"]["tool_status"] == "success"
    custom = next(e for e in events if e["type"] == "order_looked_up")
    assert custom["data"] == {"order_id": "42"} and started["seq"] < custom["seq"] < result["seq"]
    deltas = "".join(e["data"]["text"] for e in events if e["type"] == "text_delta" and e["data"]["side"] == "a")
    assert deltas.startswith("Hello, how can I help?")
    created = [e["data"]["content"] for e in events if e["type"] == "message_created"]
    assert created[:2] == ["Hello, how can I help?", "Where is order 42?"]
    assert events[-1]["data"]["reason"] == "end_conversation"


async def test_reconnect_with_last_seq_gets_missed_events_then_live(live: Any) -> None:
    srv = await live(GATED)
    tid = await srv.thread()
    async with srv.events(tid) as ws:
        await srv.http.post(f"/threads/{tid}/run", headers=ALICE)
        first = await read_until(
            ws, pred=lambda e: e["type"] == "tool_call_started" and e["data"]["name"] == "wait_gate"
        )
    last = first[-1]["seq"]
    await asyncio.wait_for(GATE["entered"].wait(), 10)  # the call's message was published while nobody listened
    async with srv.events(tid, after=last) as ws:
        missed = await read_until(ws, type="message_created")
        GATE["open"].set()  # the rest happens while this client is connected
        rest = await read_until(ws, type="execution_stopped")
    combined = first + missed + rest
    _contiguous(combined)
    assert missed[0]["seq"] == last + 1
    assert any(e["type"] == "tool_result" and e["data"]["content"] == "gate passed" for e in rest)
    async with srv.events(tid, after=0) as ws:  # a fresh client, after the end, replays the durable log
        replay = await read_until(ws, type="execution_stopped")
    # text deltas are live-only: once the execution is over (and nobody watches)
    # they are not kept in memory, their text being in message_created
    assert [(e["seq"], e["type"]) for e in replay] == [
        (e["seq"], e["type"]) for e in combined if e["type"] != "text_delta"
    ]


async def test_reconnect_after_the_run_ended(live: Any) -> None:
    srv = await live(CONVERSATION)
    tid = await srv.thread()
    await srv.http.post(f"/threads/{tid}/run?wait=true", headers=ALICE)
    async with srv.events(tid, after=0) as ws:
        everything = await read_until(ws, type="execution_stopped")
    middle = everything[len(everything) // 2]["seq"]
    async with srv.events(tid, after=middle) as ws:
        tail = await read_until(ws, type="execution_stopped")
    assert [e["seq"] for e in tail] == [e["seq"] for e in everything if e["seq"] > middle]


async def test_several_clients_each_receive_every_event_once(live: Any) -> None:
    srv = await live(CONVERSATION)
    tid = await srv.thread()
    async with (
        srv.events(tid) as c1,
        srv.events(tid) as c2,
        srv.events(tid, subprotocols=["bearer", "token-alice"], headers={}) as c3,
    ):
        assert c3.subprotocol == "bearer"
        first = await asyncio.gather(*(read_until(c, type="thread_created") for c in (c1, c2, c3)))
        await srv.http.post(f"/threads/{tid}/run", headers=ALICE)
        rest = await asyncio.gather(*(read_until(c, type="execution_stopped") for c in (c1, c2, c3)))
        for c in (c1, c2, c3):  # nothing more arrives: no duplicates trailing behind
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.recv(), 0.2)
    streams = [f + r for f, r in zip(first, rest, strict=True)]
    for stream in streams:
        _contiguous(stream)
        assert stream == streams[0]


async def test_socket_auth_and_ownership(live: Any) -> None:
    srv = await live(CONVERSATION)
    tid = await srv.thread()
    cases = [({}, 0, 401), (BOB, 0, 404), ({"Authorization": "Bearer wrong"}, 0, 401), (ALICE, -1, 422)]
    for headers, after, status in cases:
        with pytest.raises(InvalidStatus) as info:
            async with srv.events(tid, after=after, headers=headers):
                pass
        assert info.value.response.status_code == status
        assert "error" in json.loads(info.value.response.body)
    with pytest.raises(InvalidStatus) as info:
        async with srv.events("thr_missing"):
            pass
    assert info.value.response.status_code == 404
    with pytest.raises(InvalidStatus) as info:  # a stranger's token as subprotocol: 404 too
        async with srv.events(tid, headers={}, subprotocols=["bearer", "token-bob"]):
            pass
    assert info.value.response.status_code == 404
