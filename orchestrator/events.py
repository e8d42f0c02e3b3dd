"""The per-thread event bus: sequence numbers, live fan-out, reconnect.

Every event gets the thread's next sequence number. Durable events are written
to the thread's event log (with the step that produced them, or on their own);
high-rate ephemeral ones (`text_delta`) only go to live subscribers and a
bounded in-memory ring. A subscriber that reconnects with the last number it saw
gets the stored events after it (plus ring events still held), then the live
stream, each once and in order.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import structlog

from .env import Redactor
from .messages import Event
from .storage.base import Storage

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
    def __init__(self, storage: Storage, redactor: Redactor) -> None:
        self._storage = storage
        self._redactor = redactor
        self._channels: dict[str, _Channel] = {}

    async def attach(self, thread_id: str) -> None:
        """Load the thread's last sequence number; call before publishing."""
        if thread_id not in self._channels:
            last = await self._storage.last_event_seq(thread_id)
            self._channels.setdefault(thread_id, _Channel(last))

    def publish(self, thread_id: str, type: str, data: Any = None, *, defer: bool = False) -> Event:
        """Number and fan out an event. Durable events are written soon after,
        or with the caller's step when `defer` is set (see `take_pending`)."""
        ch = self._channels.get(thread_id)
        if ch is None:
            raise RuntimeError(f"event bus: thread {thread_id} is not attached")
        ch.seq += 1
        if self._redactor.active:
            data = self._redactor.data(data)
        event = Event(thread_id=thread_id, seq=ch.seq, type=type, data=data, at=time.time())
        ch.ring.append(event)
        for queue in ch.subscribers:
            queue.put_nowait(event)
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
        events = self.take_pending(thread_id)
        if events:
            await self._storage.append_events(events)

    async def _flush_soon(self, thread_id: str) -> None:
        ch = self._channels[thread_id]
        try:
            await asyncio.sleep(0)  # let a step that is about to commit take them first
            await self.flush(thread_id)
        except Exception:  # the log must not take the executor down
            _log.exception("event_flush_failed", thread_id=thread_id)
        finally:
            ch.flushing = None

    async def subscribe(self, thread_id: str, after: int = 0) -> AsyncIterator[Event]:
        """Events with seq > after: the missed ones first, then live, each once."""
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
