"""The PostgreSQL execution queue and the worker, in one process.

(The multi-process run with a killed worker is tests/test_multiprocess.py.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import respx

from orchestrator.queue import ExecutionQueue
from orchestrator.runtime import Runtime
from orchestrator.settings import RuntimeSettings
from orchestrator.storage.postgres import PostgresStorage
from orchestrator.worker import Worker, submit
from providers.config import config_from_dict
from storage_backends import FakeClock
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


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    TOOL_RUNS.clear()


@pytest.fixture
async def stack(pg_schema: str) -> AsyncIterator[Callable[..., Any]]:
    """`runtime, queue, model = await stack(lease_ttl=...)`: PostgreSQL + scripted model."""
    router = respx.mock(assert_all_called=False)
    router.start()
    opened: list[Any] = []

    async def make(*, lease_ttl: float = 5.0, clock: Any = None, max_attempts: int = 5) -> tuple[Runtime, ExecutionQueue, UniqueIdsModel]:
        model = UniqueIdsModel(answer, tag=f"p{len(opened)}")
        model.mount(router)
        kwargs = {"clock": clock} if clock else {}
        storage = PostgresStorage(PG_DSN, schema=pg_schema, **kwargs)
        runtime = Runtime(duo_definitions(), config=config_from_dict(SCRIPTED_CONFIG), storage=storage, settings=RuntimeSettings(lease_ttl=lease_ttl))
        await runtime.open()
        queue = ExecutionQueue.for_storage(storage, max_attempts=max_attempts, **kwargs)
        await queue.open()
        opened.extend([queue, runtime])
        return runtime, queue, model

    try:
        yield make
    finally:
        for item in opened:
            await item.close()
        router.stop()


async def _threads(runtime: Runtime, n: int, agent: str = "duo") -> list[str]:
    return [(await runtime.create_thread(agent)).id for _ in range(n)]


async def _run_worker_until(worker: Worker, done: Callable[[], Any], timeout: float = 30) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(timeout):
            while not await done():
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task


# -- the queue -------------------------------------------------------------------


async def test_pick_is_ordered_per_thread_and_fenced_by_worker(stack: Any) -> None:
    runtime, queue, _ = await stack()
    t1, t2 = await _threads(runtime, 2)
    first = await queue.enqueue(t1)
    second = await queue.enqueue(t1, "send", "hello")
    other = await queue.enqueue(t2)

    a = await queue.pick("A")
    b = await queue.pick("B")
    assert (a.id, b.id) == (first, other)  # t1's second request waits for its first
    assert await queue.pick("C") is None
    assert not await queue.done(a.id, "B")  # not B's to finish
    assert await queue.done(a.id, "A")
    c = await queue.pick("C")
    assert (c.id, c.kind, c.text, c.attempts) == (second, "send", "hello", 1)
    assert await queue.counts() == {"done": 1, "picked": 2}


async def test_concurrent_pickers_never_share_a_request(stack: Any) -> None:
    runtime, queue, _ = await stack()
    ids = [await queue.enqueue(t) for t in await _threads(runtime, 30)]
    got: list[int] = []

    async def picker(name: str) -> None:
        while (request := await queue.pick(name)) is not None:
            got.append(request.id)

    await asyncio.gather(*(picker(f"w{i}") for i in range(8)))
    assert sorted(got) == sorted(ids)


async def test_enqueue_checks_its_arguments(stack: Any) -> None:
    runtime, queue, _ = await stack()
    [t] = await _threads(runtime, 1)
    with pytest.raises(ValueError, match="kind must be"):
        await queue.enqueue(t, "walk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs text"):
        await queue.enqueue(t, "send")


async def test_reclaim_waits_for_the_lease_to_lapse_then_gives_up_after_max_attempts(stack: Any) -> None:
    clock = FakeClock()
    runtime, queue, _ = await stack(clock=clock, max_attempts=2)
    [t] = await _threads(runtime, 1)
    request_id = await queue.enqueue(t)
    picked = await queue.pick("dead-worker")
    await runtime.storage.acquire_lease(t, "dead-worker", 10)

    clock.advance(6)
    assert await queue.reclaim(stale_after=5) == 0  # its lease still runs: maybe just slow
    clock.advance(5)
    assert await queue.reclaim(stale_after=5) == 1
    again = await queue.pick("second")
    assert (again.id, again.attempts) == (picked.id, 2)
    assert not await queue.done(request_id, "dead-worker")  # the late finisher changes nothing

    clock.advance(6)
    assert await queue.reclaim(stale_after=5) == 0
    assert (await queue.get(request_id)).status == "failed"


# -- the worker ------------------------------------------------------------------


async def test_worker_runs_queued_threads_to_completion(stack: Any) -> None:
    runtime, queue, model = await stack()
    threads = await _threads(runtime, 6)
    for t in threads:
        await submit(runtime, queue, t)
    worker = Worker(runtime, queue, concurrency=3, poll_interval=0.2)

    async def all_done() -> bool:
        return (await queue.counts()).get("done") == 6

    await _run_worker_until(worker, all_done)
    for t in threads:
        record = await runtime.storage.get_thread(t)
        assert record.status == "completed" and record.execution.reason == "end_conversation"
        assert shape((await runtime.storage.get_messages(t)).messages) == DUO_SHAPE
    assert len(TOOL_RUNS) == 12 and len({(t, c) for t, c, _ in TOOL_RUNS}) == 12
    assert (worker.stats.picked, worker.stats.done) == (6, 6)
    assert len(worker.stats.pickup_latency) == 6 and sorted(worker.stats.pickup_latency)[2] < 1  # the first three wait for nothing
    # the API side's thread_created (seq 1) and the worker's events share one numbering
    events = await runtime.storage.events_after(threads[0], 0)
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)) and [(e.seq, e.type) for e in events[:2]] == [(1, "thread_created"), (2, "execution_started")]


async def test_a_request_already_served_is_closed_without_running_again(stack: Any) -> None:
    runtime, queue, model = await stack()
    [t] = await _threads(runtime, 1)
    request_id = await submit(runtime, queue, t)
    worker = Worker(runtime, queue, concurrency=1, poll_interval=0.2)

    async def done() -> bool:
        return (await queue.counts()).get("done") == 1

    await _run_worker_until(worker, done)
    served = await queue.get(request_id)
    assert served.flow_id == (await runtime.storage.get_thread(t)).execution.flow_id
    requests_before = len(model.requests)
    # as if the worker died after finishing but before marking the request done
    await queue._p().execute("UPDATE execution_requests SET status = 'queued' WHERE id = $1", request_id)
    await _run_worker_until(Worker(runtime, queue, concurrency=1, poll_interval=0.2), done)
    assert len(model.requests) == requests_before
    assert len(TOOL_RUNS) == 2


async def test_a_busy_thread_waits_without_using_up_attempts(stack: Any) -> None:
    runtime, queue, _ = await stack()
    [t] = await _threads(runtime, 1)
    lease = await runtime.storage.acquire_lease(t, "someone-else", 30)
    request_id = await submit(runtime, queue, t)
    worker = Worker(runtime, queue, concurrency=1, poll_interval=0.05, busy_delay=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(20):
            while worker.stats.retried < 2:
                await asyncio.sleep(0.02)
            assert (await queue.get(request_id)).attempts <= 1
            await runtime.storage.release_lease(lease)
            while (await queue.get(request_id)).status != "done":
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    assert (await runtime.storage.get_thread(t)).status == "completed"


async def test_send_requests_run_in_order(stack: Any) -> None:
    runtime, queue, _ = await stack()
    [t] = await _threads(runtime, 1, agent="chat")
    for text in ("first", "second", "third"):
        await submit(runtime, queue, t, text)
    worker = Worker(runtime, queue, concurrency=4, poll_interval=0.1)

    async def done() -> bool:
        return (await queue.counts()).get("done") == 3

    await _run_worker_until(worker, done)
    people = [m.content for m in (await runtime.storage.get_messages(t)).messages if m.side == "b"]
    assert people == ["first", "second", "third"]
