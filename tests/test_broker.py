"""Events and control across processes through Redis.

Two Runtimes on one PostgreSQL, each with its own bus and its own Redis
connections, stand for two processes: a worker that runs threads and a server
whose subscribers watch them. (tests/test_multiprocess.py does it with real
processes; the worker's side, tests/test_temporal.py.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import respx
from temporal_support import dev_server
from test_worker_support import (  # noqa: F401
    PG_DSN,
    REDIS_URL,
    SCRIPTED_CONFIG,
    TOOL_RUNS,
    UniqueIdsModel,
    answer,
    duo_definitions,
    pg_schema,
    redis_prefix,
)

from orchestrator.core.messages import Event
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.storage.base import StepWrite
from orchestrator.storage.broker import RedisBroker
from orchestrator.storage.postgres import PostgresStorage
from orchestrator.temporal import TemporalOptions, ThreadRequests, connect
from orchestrator.temporal.worker import Worker
from providers.config import config_from_dict


@pytest.fixture
async def node(pg_schema: str, redis_prefix: str) -> AsyncIterator[Callable[..., Any]]:
    """`runtime, broker = await node()`: one "process" (runtime + broker) on the shared database and Redis."""
    router = respx.mock(assert_all_called=False)
    router.start()
    UniqueIdsModel(answer, tag="b").mount(router)
    opened: list[Any] = []

    async def make() -> tuple[Runtime, RedisBroker]:
        storage = PostgresStorage(PG_DSN, schema=pg_schema)
        runtime = Runtime(
            duo_definitions(),
            config=config_from_dict(SCRIPTED_CONFIG),
            storage=storage,
            settings=RuntimeSettings(lease_ttl=5),
        )
        await runtime.open()
        broker = await RedisBroker(REDIS_URL, prefix=redis_prefix, block_ms=500).open()
        runtime.services.bus.use_broker(broker)
        opened.extend([runtime, broker])
        return runtime, broker

    try:
        yield make
    finally:
        for item in reversed(opened):
            await item.close()
        router.stop()
        TOOL_RUNS.clear()


async def _collect(runtime: Runtime, thread_id: str, after: int, until: Callable[[Event], bool]) -> list[Event]:
    seen: list[Event] = []
    thread = await runtime.get_thread(thread_id)
    async with asyncio.timeout(30):
        async for event in thread.events(after=after):
            seen.append(event)
            if until(event):
                return seen
    return seen


def _stopped(event: Event) -> bool:
    return event.type == "execution_stopped"


class _Requests:
    """The server's way to hand a thread to the workers (Temporal, on the tests' dev server)."""

    def __init__(self, requests: ThreadRequests) -> None:
        self.requests = requests

    async def close(self) -> None:
        pass


async def _start_worker(
    runtime: Runtime, broker: RedisBroker
) -> tuple[Worker, asyncio.Event, asyncio.Task[None], _Requests]:
    options = TemporalOptions(
        address=dev_server().address, task_queue=f"test-{uuid.uuid4().hex[:12]}", heartbeat_timeout=2
    )
    worker = Worker(runtime, options, broker=broker, concurrency=4, drain_timeout=1)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    return worker, stop, task, _Requests(ThreadRequests(await connect(options), options))


async def submit(server: Runtime, queue: _Requests, thread_id: str) -> str:
    await server.services.bus.flush(thread_id)  # the API side's events first, as QueuedRuns does
    return await queue.requests.submit(thread_id, None, last_flow=None)


async def test_a_subscriber_in_another_process_sees_every_event_once_in_order(node: Any) -> None:
    server, _ = await node()
    worker_rt, worker_broker = await node()
    worker, stop, task, queue = await _start_worker(worker_rt, worker_broker)
    try:
        threads = [await server.create_thread("duo") for _ in range(3)]
        watchers = [asyncio.create_task(_collect(server, t.id, 0, _stopped)) for t in threads]
        await asyncio.sleep(0.1)
        for t in threads:
            await submit(server, queue, t.id)
        results = await asyncio.gather(*watchers)
    finally:
        stop.set()
        await task
        await queue.close()
    for thread, seen in zip(threads, results, strict=True):
        seqs = [e.seq for e in seen]
        assert seqs == list(range(1, len(seqs) + 1))  # no gaps, no repeats: deltas included
        types = [e.type for e in seen]
        assert types[0] == "thread_created" and "text_delta" in types and types[-1] == "execution_stopped"
        stored = await server.storage.events_after(thread.id, 0)
        by_seq = {e.seq: e for e in seen}
        assert all(by_seq[e.seq].type == e.type and by_seq[e.seq].data == e.data for e in stored)
        created = [e.data["id"] for e in seen if e.type == "message_created"]
        assert len(created) == len(set(created)) == 3  # three steps, each message announced once


async def test_an_execution_takes_up_the_numbering_from_what_its_lease_read(node: Any) -> None:
    """`begin_execution` reads the log's last seq in its lease's transaction; the bus continues from it and
    the stream's, without asking storage again (a PostgreSQL round trip per execution, before)."""
    runtime, _ = await node()
    thread = await runtime.create_thread("duo")
    asked: list[str] = []
    last_event_seq = runtime.storage.last_event_seq

    async def counted(thread_id: str) -> int:
        asked.append(thread_id)
        return await last_event_seq(thread_id)

    runtime.storage.last_event_seq = counted  # type: ignore[method-assign]
    await thread.run()
    await thread.run()
    assert asked == []
    seqs = [e.seq for e in await runtime.storage.events_after(thread.id, 0)]
    assert seqs == sorted(set(seqs)) and len(seqs) > 10


async def test_reconnecting_with_the_last_seq_resumes_without_repeats(node: Any) -> None:
    server, _ = await node()
    worker_rt, worker_broker = await node()
    worker, stop, task, queue = await _start_worker(worker_rt, worker_broker)
    try:
        thread = await server.create_thread("duo")
        await submit(server, queue, thread.id)
        first = await _collect(server, thread.id, 0, lambda e: e.type == "tool_result")
        rest = await _collect(server, thread.id, first[-1].seq, _stopped)
        whole = await _collect(server, thread.id, 0, _stopped)
    finally:
        stop.set()
        await task
        await queue.close()
    assert [e.seq for e in first + rest] == [e.seq for e in whole] == list(range(1, len(whole) + 1))


async def test_stored_events_a_dead_publisher_never_streamed_are_filled_in(node: Any) -> None:
    runtime, broker = await node()
    thread = await runtime.create_thread("duo")  # seq 1, streamed
    await runtime.services.bus.flush(thread.id)
    # a publisher that committed seqs 2..4 and died before sending them
    lost = [Event(thread_id=thread.id, seq=s, type="custom", data={"n": s}) for s in (2, 3, 4)]
    await runtime.storage.append_events(lost)
    assert await broker.last_seq(thread.id) == 1
    # ... and a live event after them, from whoever took over
    await broker.append(thread.id, [Event(thread_id=thread.id, seq=6, type="custom", data={"n": 6})])
    seen = await _collect(runtime, thread.id, 0, lambda e: e.seq == 6)
    assert [e.seq for e in seen] == [1, 2, 3, 4, 6]
    # attaching to publish repairs the stream itself, so live readers elsewhere get them too
    await broker._r().delete(broker.stream_key(thread.id))
    await broker.append(thread.id, [Event(thread_id=thread.id, seq=1, type="thread_created")])
    await runtime.services.bus.attach(thread.id)
    entries = await broker._r().xrange(broker.stream_key(thread.id))
    assert [e[0] for e in entries] == [b"1-0", b"2-0", b"3-0", b"4-0"]
    assert runtime.services.bus.publish(thread.id, "custom").seq == 5


async def test_a_stale_publisher_cannot_rewrite_the_stream(node: Any) -> None:
    runtime, stale = await node()
    _, current = await node()
    thread = await runtime.create_thread("duo")
    await runtime.services.bus.flush(thread.id)
    assert await stale.claim(thread.id) == 1  # an owner that will stall ...
    assert await current.claim(thread.id) == 1  # ... and the one that took over
    newer = [Event(thread_id=thread.id, seq=s, type="custom") for s in (2, 3)]
    assert await current.append(thread.id, newer, epoch=current._epochs[thread.id]) == 2
    late = [Event(thread_id=thread.id, seq=s, type="late") for s in (4, 5)]
    assert await stale.append(thread.id, late, epoch=stale._epochs[thread.id]) == -1  # refused whole
    repeat = [Event(thread_id=thread.id, seq=3, type="again")]
    assert await current.append(thread.id, repeat, epoch=current._epochs[thread.id]) == 0  # ids only grow
    assert [e.type for e in await _collect(runtime, thread.id, 1, lambda e: e.seq == 3)] == ["custom", "custom"]
    assert await current.last_seq(thread.id) == 3


STOPPED = {"flow_id": "flow_1", "reason": "end_conversation", "stopped_by": "b"}  # the shape event_types checks


async def test_execution_stopped_reaches_the_stream_only_once_stored(node: Any) -> None:
    """A worker killed between announcing the end and committing it must not
    leave clients told "stopped" while the thread is still running (the next
    worker resumes it and announces its own start and stop)."""
    runtime, broker = await node()
    bus = runtime.services.bus
    thread = await runtime.create_thread("duo")  # seq 1
    await bus.flush(thread.id)
    await bus.attach(thread.id)
    bus.publish(thread.id, "turn_ended", {"side": "b", "reason": "end_conversation"}, defer=True)  # 2: live at once
    bus.publish(thread.id, "execution_stopped", STOPPED, defer=True)  # 3: held ...
    bus.publish(
        thread.id, "text_delta", {"side": "b", "depth": 0, "text": "after"}
    )  # 4: ... and what follows it, in order
    await broker.drain()
    assert await broker.last_seq(thread.id) == 2
    await runtime.storage.commit(StepWrite(thread_id=thread.id, events=bus.take_pending(thread.id)))  # the final step
    await bus.flush(thread.id)
    entries = await broker._r().xrange(broker.stream_key(thread.id))
    assert [e[0] for e in entries] == [b"1-0", b"2-0", b"3-0", b"4-0"]


async def test_an_end_whose_commit_failed_is_never_announced(node: Any) -> None:
    runtime, broker = await node()
    _, other_broker = await node()
    bus = runtime.services.bus
    thread = await runtime.create_thread("duo")
    await bus.flush(thread.id)
    await bus.attach(thread.id)
    bus.publish(thread.id, "execution_stopped", STOPPED, defer=True)  # 2
    bus.take_pending(thread.id)  # taken by a commit that then failed
    await bus.flush(thread.id)
    assert await broker.last_seq(thread.id) == 1 and await runtime.storage.last_event_seq(thread.id) == 1
    assert await other_broker.claim(thread.id) == 1  # whoever resumes the thread numbers on from 1


async def test_in_process_subscribers_get_a_held_end_in_order(node: Any) -> None:
    runtime, _ = await node()
    bus = runtime.services.bus
    bus.use_broker(None)  # one process: subscribers hang off the bus itself
    thread = await runtime.create_thread("duo")  # seq 1
    await bus.flush(thread.id)
    bus.publish(thread.id, "execution_stopped", STOPPED, defer=True)  # 2, held
    bus.publish(thread.id, "custom", {"n": 3}, defer=True)  # 3, behind it
    watcher = asyncio.create_task(_collect(runtime, thread.id, 0, lambda e: e.seq == 3))
    await asyncio.sleep(0.2)
    assert not watcher.done()  # the backlog stops short of the held end
    await runtime.storage.commit(StepWrite(thread_id=thread.id, events=bus.take_pending(thread.id)))
    await bus.flush(thread.id)
    assert [(e.seq, e.type) for e in await watcher] == [(1, "thread_created"), (2, "execution_stopped"), (3, "custom")]


async def test_force_turn_checks_the_side(node: Any) -> None:
    _, broker = await node()
    with pytest.raises(ValueError, match="side must be 'a' or 'b'"):
        await broker.force_turn("thr_x", "c")


async def test_a_subscriber_that_falls_behind_the_stream_is_dropped_and_can_resume(node: Any) -> None:
    from orchestrator.storage.events import SUBSCRIBER_QUEUE, SubscriberLagging

    server, _ = await node()
    publisher, _ = await node()
    thread = await server.create_thread("duo")
    stalled = (await server.get_thread(thread.id)).events()
    assert (await asyncio.wait_for(anext(stalled), 10)).type == "thread_created"  # replayed; live next
    await server.services.bus.flush(thread.id)
    bus = publisher.services.bus
    await bus.attach(thread.id)
    bus.publish(thread.id, "hello")
    async with asyncio.timeout(10):
        while (first := await anext(stalled)).type != "hello":  # reading live; then it stops reading
            pass
    count = SUBSCRIBER_QUEUE + 10
    for i in range(count):
        bus.publish(thread.id, "tick", {"i": i})
    await bus.flush(thread.id)
    await asyncio.sleep(1)  # the reader fans the burst out while the subscriber reads nothing
    with pytest.raises(SubscriberLagging) as lagging:
        async with asyncio.timeout(30):
            while True:
                await anext(stalled)
    assert lagging.value.after == first.seq
    ticks = await _collect(
        server, thread.id, lagging.value.after, lambda e: e.type == "tick" and e.data["i"] == count - 1
    )
    assert [e.data["i"] for e in ticks] == list(range(count))  # nothing lost


async def test_a_redis_that_cannot_be_reached_fails_every_open_not_only_the_first(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`settings.redis` names the broker this process's events must go through. Before, a first `open()`
    that could not reach it raised, but left the runtime half open: the next `open()` (which every
    call makes) returned at once, and the runtime ran on without a broker, its events reaching no
    other process and nothing saying so."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from orchestrator.storage.sqlite import SQLiteStorage

    async def unreachable(self: RedisBroker) -> RedisBroker:
        raise RedisConnectionError(f"Error 111 connecting to {self.url}")

    monkeypatch.setattr(RedisBroker, "open", unreachable)
    runtime = Runtime(
        duo_definitions(),
        config=config_from_dict(SCRIPTED_CONFIG),
        storage=SQLiteStorage(str(tmp_path / "rt.db")),
        settings=RuntimeSettings(redis="redis://127.0.0.1:9/0"),
    )
    for _ in range(2):
        with pytest.raises(RedisConnectionError):
            await runtime.open()
        with pytest.raises(RuntimeError, match="not open"):
            runtime.services  # noqa: B018 - the property raises
    await runtime.close()


async def test_with_a_broker_leftover_events_whose_seqs_the_log_took_do_not_fail_the_next_commit(
    tmp_path: Any, redis_prefix: str
) -> None:
    """As without a broker (tests/test_event_durability.py): events an execution here could not write,
    whose seqs another process has stored its own at since, go when the next execution reads the log
    under its lease; before, its first commit carried them and failed whole."""
    from test_event_durability import leftovers_then_the_next_execution

    broker = await RedisBroker(REDIS_URL, prefix=redis_prefix, block_ms=100).open()
    try:
        log = await leftovers_then_the_next_execution(tmp_path / "bus.db", broker)
    finally:
        await broker.close()
    assert log == [(1, "theirs"), (2, "theirs"), (3, "mine"), (4, "next")]
