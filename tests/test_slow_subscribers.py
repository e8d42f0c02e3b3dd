"""A subscriber that stops reading costs the server a bounded amount of memory:
it is dropped once it falls SUBSCRIBER_QUEUE events behind, and a WebSocket
client is told so with close code 1013 and the `after=` to reconnect with."""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from typing import Any

import pytest
from support import definitions
from test_server_api import ALICE
from test_server_ws import live  # noqa: F401 - the fixture
from websockets.exceptions import ConnectionClosed

from orchestrator import Side, define_agent, define_prompt
from orchestrator.storage.events import SUBSCRIBER_QUEUE, SubscriberLagging
from providers.scripted import ScriptedResponse

DELTAS = 10_000


async def _held_after_send(thread: Any) -> tuple[int, Any]:
    """Bytes still allocated once `thread.send` is over (tracemalloc, after a collection)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = await thread.send("talk")
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, result
    finally:
        tracemalloc.stop()


@pytest.mark.slow  # tracemalloc over 30,000 deltas: seconds
async def test_stalled_subscriber_during_10000_deltas_costs_under_5_mb(make_runtime: Any) -> None:
    prompts = {"pa": define_prompt(prompt="side a", tool_description="a")}
    defs = definitions(prompts=prompts, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))})
    text = "".join(f"word{i:05d} " for i in range(DELTAS))  # 10 characters a word: one delta each
    rt, _ = await make_runtime(defs, [ScriptedResponse(text=text, chunk_size=10)] * 3)
    await (await rt.create_thread("chat")).send("warm up")  # first-use caches are not the subscriber's cost
    unwatched, _ = await _held_after_send(await rt.create_thread("chat"))  # what the test's scripted model keeps
    thread = await rt.create_thread("chat")
    stalled = thread.events()
    assert (await anext(stalled)).type == "thread_created"  # subscribed, then it stops reading
    watched, result = await _held_after_send(thread)
    assert result.output == text.strip() or result.output == text
    cost = watched - unwatched
    assert cost < 5 * 2**20, f"a stalled subscriber costs the server {cost / 2**20:.1f} MB"
    with pytest.raises(SubscriberLagging) as lagging:
        while True:
            await anext(stalled)
    assert lagging.value.after == 1  # it got thread_created, nothing after
    replay = [e async for e in _until_stopped(thread.events(after=lagging.value.after))]
    assert replay[-1].type == "execution_stopped"


async def _until_stopped(events: Any) -> Any:
    async for event in events:
        yield event
        if event.type == "execution_stopped":
            return


async def test_websocket_client_that_falls_behind_is_closed_with_1013_and_reconnects(live: Any) -> None:
    srv = await live([])
    tid = await srv.thread()
    bus = srv.app.state.server.runtime.services.bus
    async with srv.events(tid) as ws:
        first = json.loads(await ws.recv())
        assert first["type"] == "thread_created"
        for i in range(SUBSCRIBER_QUEUE + 10):  # without yielding: faster than any client reads
            bus.publish(tid, "tick", {"i": i})
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    assert closed.value.rcvd.reason == f"fell behind: reconnect with after={first['seq']}"
    await bus.flush(tid)
    async with srv.events(tid, after=first["seq"]) as ws:
        ticks = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(SUBSCRIBER_QUEUE + 10)]
    assert [e["data"]["i"] for e in ticks] == list(range(SUBSCRIBER_QUEUE + 10))  # nothing lost
    assert ALICE  # the live fixture's owner
