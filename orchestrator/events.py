"""The per-thread event bus: sequence numbers, live fan-out, reconnect.

Every event gets the thread's next sequence number. Durable events are written
to the thread's event log (with the step that produced them, or on their own);
high-rate ephemeral ones (`text_delta`) only go to live subscribers and a
bounded in-memory ring. A subscriber that reconnects with the last number it saw
gets the stored events after it (plus ring events still held), then the live
stream, each once and in order.

With a broker (`use_broker`, see orchestrator/broker.py) every event also goes
to a cross-process stream, `subscribe` reads that stream, and `attach` re-reads
the thread's last seq each time, because another process may have published
since: several processes then share one thread's numbering, one at a time (the
lease decides which).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import structlog

from .env import Redactor
from .messages import Event
from .storage.base import StepWrite, Storage, StorageError

if TYPE_CHECKING:
    from .broker import RedisBroker

EPHEMERAL_EVENTS = frozenset({"text_delta"})
_RING_SIZE = 2048
_log = structlog.get_logger("orchestrator.events")


class _Channel:
    __slots__ = ("seq", "ring", "subscribers", "pending", "flushing")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.ring: deque[Event] = deque(maxlen=_RING_SIZE)
        self.subscribers: set[asyncio.Queue[Event]] = set()
        self.pending: list[Event] = []  # durable events not yet written
        self.flushing: asyncio.Task[None] | None = None


class EventBus:
    def __init__(self, storage: Storage, redactor: Redactor, broker: RedisBroker | None = None) -> None:
        self._storage = storage
        self._redactor = redactor
        self._channels: dict[str, _Channel] = {}
        self._broker = broker
        self._fences: dict[str, int] = {}  # thread -> lease token of the execution this process runs

    def fence(self, thread_id: str, token: int | None) -> None:
        """Write this thread's events under `token` (its execution's lease), so a
        stale owner's late events are refused like its other writes."""
        if token is None:
            self._fences.pop(thread_id, None)
        else:
            self._fences[thread_id] = token

    def use_broker(self, broker: RedisBroker | None) -> None:
        """Fan events out across processes through `broker` (None: this process only)."""
        self._broker = broker

    async def attach(self, thread_id: str, *, new: bool = False) -> None:
        """Load the thread's last sequence number; call before publishing.
        `new`: the thread was just created here, so it has no events yet."""
        if self._broker is not None:
            await self._attach_shared(thread_id, self._broker)
        elif thread_id not in self._channels:
            last = 0 if new else await self._storage.last_event_seq(thread_id)
            self._channels.setdefault(thread_id, _Channel(last))

    async def _attach_shared(self, thread_id: str, broker: RedisBroker) -> None:
        """Continue the numbering from wherever any process left it. A publisher
        that died leaves the log and the stream uneven: stored events it never
        streamed go to the stream, durable events it streamed but never stored
        go to the log, so both hold what live clients saw."""
        streamed = await broker.claim(thread_id)
        stored = await self._storage.last_event_seq(thread_id)
        if stored > streamed:
            await broker.backfill(thread_id, self._storage)
        elif streamed > stored:
            for event in await broker.events_between(thread_id, stored, None):
                if event.type not in EPHEMERAL_EVENTS:
                    try:
                        await self._storage.append_events([event])
                    except StorageError:  # its writer got there after all
                        pass
        ch = self._channels.setdefault(thread_id, _Channel(0))
        ch.seq = max(ch.seq, stored, streamed)

    def detach(self, thread_id: str) -> None:
        """Forget a thread this process stopped publishing for (another process
        may publish next); kept while it has subscribers or unwritten events."""
        ch = self._channels.get(thread_id)
        if ch is not None and not ch.subscribers and not ch.pending and ch.flushing is None:
            del self._channels[thread_id]
            if self._broker is not None:
                self._broker.forget(thread_id)

    def publish(self, thread_id: str, type: str, data: Any = None, *, defer: bool = False) -> Event:
        """Number and fan out an event. Durable events are written soon after,
        or with the caller's step when `defer` is set (see `take_pending`)."""
        ch = self._channels.get(thread_id)
        if ch is None:
            raise RuntimeError(f"event bus: thread {thread_id} is not attached")
        ch.seq += 1
        if self._redactor.active:
            data = self._redactor.data(data)
        event = Event.model_construct(thread_id=thread_id, seq=ch.seq, type=type, data=data, at=time.time())  # fields are ours: skip validation
        ch.ring.append(event)
        for queue in ch.subscribers:
            queue.put_nowait(event)
        if self._broker is not None:
            self._broker.publish(event)
        if type not in EPHEMERAL_EVENTS:
            ch.pending.append(event)
            if not defer and ch.flushing is None:
                ch.flushing = asyncio.get_running_loop().create_task(self._flush_soon(thread_id))
        return event

    def take_pending(self, thread_id: str) -> list[Event]:
        """Hand the unwritten durable events to a caller that writes them in its transaction."""
        ch = self._channels.get(thread_id)
        if ch is None:
            return []
        events, ch.pending = ch.pending, []
        return events

    async def flush(self, thread_id: str) -> None:
        await self._write_pending(thread_id)
        if self._broker is not None:
            await self._broker.drain()

    async def _write_pending(self, thread_id: str) -> None:
        events = self.take_pending(thread_id)
        if not events:
            return
        token = self._fences.get(thread_id)
        if token is None:
            await self._storage.append_events(events)
        else:
            await self._storage.commit(StepWrite(thread_id=thread_id, events=events, lease_token=token))

    async def _flush_soon(self, thread_id: str) -> None:
        ch = self._channels[thread_id]
        try:
            await asyncio.sleep(0)  # let a step that is about to commit take them first
            await self._write_pending(thread_id)
        except Exception:  # the log must not take the executor down
            _log.exception("event_flush_failed", thread_id=thread_id)
        finally:
            ch.flushing = None

    async def subscribe(self, thread_id: str, after: int = 0) -> AsyncIterator[Event]:
        """Events with seq > after: the missed ones first, then live, each once."""
        if self._broker is not None:
            await self._storage.last_event_seq(thread_id)  # unknown thread: NotFoundError now
            async for event in self._broker.subscribe(thread_id, after, self._storage):
                yield event
            return
        await self.attach(thread_id)
        ch = self._channels[thread_id]
        queue: asyncio.Queue[Event] = asyncio.Queue()
        ch.subscribers.add(queue)
        try:
            last = after
            for event in await self._backlog(thread_id, after):
                if event.seq > last:
                    last = event.seq
                    yield event
            while True:
                event = await queue.get()
                if event.seq > last:
                    last = event.seq
                    yield event
        finally:
            ch.subscribers.discard(queue)

    async def _backlog(self, thread_id: str, after: int) -> list[Event]:
        ch = self._channels[thread_id]
        ring_now = list(ch.ring)
        pending_now = list(ch.pending)
        stored = await self._storage.events_after(thread_id, after)
        by_seq = {e.seq: e for e in stored}
        for e in pending_now + ring_now:
            if e.seq > after:
                by_seq.setdefault(e.seq, e)
        return [by_seq[s] for s in sorted(by_seq)]

    async def close(self) -> None:
        for thread_id in list(self._channels):
            await self.flush(thread_id)
