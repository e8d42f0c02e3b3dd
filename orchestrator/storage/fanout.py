"""What the live stream of a thread's events is made of: a subscriber's bounded queue (`offer`,
`SubscriberLagging`), the ring of its recent events (`Ring`), and what the event bus (events.py)
needs of a cross-process fan-out (`Broker`, which broker.py's Redis one is)."""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from pydantic_core import from_json, to_json

from orchestrator.core.messages import Event, event_of

if TYPE_CHECKING:
    from orchestrator.storage.base import Storage

RING_SIZE = 2048
SUBSCRIBER_QUEUE = 1024  # events a live subscriber may fall behind before it is dropped (see SubscriberLagging)


class SubscriberLagging(Exception):
    """A subscriber fell more than SUBSCRIBER_QUEUE events behind the live stream
    (a stalled client): it is dropped, so its backlog cannot grow the server's
    memory. Nothing is lost: subscribe again with `after` (the last seq it got)."""

    def __init__(self, thread_id: str, after: int) -> None:
        super().__init__(f"subscriber of thread {thread_id} fell behind; subscribe again with after={after}")
        self.thread_id = thread_id
        self.after = after


def offer(queue: asyncio.Queue[Event | None], event: Event) -> bool:
    """Put `event` on a subscriber's bounded queue; when it is full, empty it and
    leave the end mark (None) instead. False when the subscriber is dropped."""
    try:
        queue.put_nowait(event)
        return True
    except asyncio.QueueFull:
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(None)
        return False


class Ring:
    """The last `RING_SIZE` live events of one thread, for a subscriber that comes (back) mid-answer.

    Kept as JSON in one bytearray, which the garbage collector does not track: a deque of entries
    held one reference per delta that every full collection followed (26 per conversation at 1,000
    in flight), and an `Event` per delta was three tracked objects. A payload comes back the way
    JSON gives it, as a stored event's does."""

    __slots__ = ("_journal", "_starts")

    def __init__(self) -> None:
        self._journal = bytearray()
        self._starts = array("q")  # where each entry begins in the journal, oldest first

    def append(self, seq: int, type_: str, at: float, data: object, payload: bytes | None = None) -> None:
        """Keep one event; `payload`: its data already encoded as the log stores it, for a durable one."""
        if len(self._starts) >= 2 * RING_SIZE:  # the older half goes at once: O(1) per entry on average
            cut = self._starts[-RING_SIZE]
            del self._journal[:cut]
            self._starts = array("q", [start - cut for start in self._starts[-RING_SIZE:]])
        self._starts.append(len(self._journal))
        if payload is None:
            self._journal += to_json((seq, type_, at, data), fallback=str)
        else:
            self._journal += b"[%d,%b,%b,%b]" % (seq, to_json(type_), to_json(at), payload)

    def after(self, thread_id: str, after: int) -> list[Event]:
        """The kept events numbered above `after`, oldest first."""
        events: list[Event] = []
        end = len(self._journal)
        for begin in reversed(self._starts[-RING_SIZE:]):
            seq, type_, at, data = from_json(self._journal[begin:end])
            event = event_of(thread_id, seq, type_, at, data)
            if event.seq <= after:
                break
            events.append(event)
            end = begin
        events.reverse()
        return events


class Broker(Protocol):
    """What the bus needs of a cross-process fan-out (`orchestrator.storage.broker.RedisBroker` is one)."""

    def publish(self, event: Event) -> None: ...
    async def drain(self) -> None: ...
    async def claim(self, thread_id: str) -> int: ...
    def forget(self, thread_id: str) -> None: ...
    async def backfill(self, thread_id: str, storage: Storage) -> int: ...
    def subscribe(self, thread_id: str, after: int, storage: Storage) -> AsyncIterator[Event]: ...
    async def events_between(self, thread_id: str, after: int, before: int | None) -> list[Event]: ...
