"""Events and control across processes, through Redis.

Why Redis Streams: a thread's events must reach a client connected to any
server process, in order, and a client that reconnects with the last `seq` it
saw must get everything after it exactly once. A stream per thread is both the
live feed (`XREAD BLOCK`) and a replay buffer (`XRANGE`), and its entry ids can
*be* the event seqs (`<seq>-0`), so "after seq N" is a native stream position
and Redis itself refuses an id that does not grow. Plain pub/sub loses whatever
is published while a subscriber reconnects; PostgreSQL LISTEN/NOTIFY carries
8 kB payloads inside transactions and would put every `text_delta` through the
database. The durable log stays in storage; the stream may be trimmed or expire,
and subscribers fill any gap from storage.

Control (stop, force_turn) travels the other way on one pub/sub channel: it is
only meaningful while an execution is live, so losing it while no worker
listens loses nothing.

    broker = RedisBroker("redis://127.0.0.1:6379/0")
    await broker.open()
    runtime.services.bus.use_broker(broker)     # publishers and subscribers alike
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog

from orchestrator.core.extras import require
from orchestrator.core.messages import Event
from orchestrator.storage.events import SUBSCRIBER_QUEUE, SubscriberLagging, offer

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.typing import KeyT, StreamIdT, StreamRangeResponse, XReadResponse

    from orchestrator.storage.base import Storage

__all__ = ["ControlMessage", "RedisBroker"]

_log = structlog.get_logger("orchestrator.storage.broker")
_READ_BLOCK_MS = 100

# Append events whose ids grow; skip (and count) the ones that would not, which
# is what a repeated backfill produces. A publisher whose epoch is older than
# the thread's current one (another process attached since) is refused whole.
_APPEND = """
local epoch = tonumber(ARGV[3])
if epoch >= 0 and epoch < tonumber(redis.call('GET', KEYS[2]) or '0') then return -1 end
local added = 0
for i = 4, #ARGV, 2 do
  local ok = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], ARGV[i], 'e', ARGV[i + 1])
  if type(ok) ~= 'table' or ok.err == nil then added = added + 1 end
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return added
"""

# A process about to publish for a thread takes the next epoch and learns where
# the stream ends, in one step: whatever an older publisher sends later is refused.
_CLAIM = """
local epoch = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[1])
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local id = '0-0'
if #last > 0 then id = last[1][1] end
return {epoch, id}
"""


@dataclass(frozen=True)
class ControlMessage:
    thread_id: str
    action: Literal["stop", "force_turn"]
    side: str | None = None
    reason: str | None = None


class RedisBroker:
    """Per-thread event streams plus a control channel, on one Redis."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "orchestrator",
        maxlen: int = 10_000,
        ttl: int = 24 * 3600,
        block_ms: int = 5_000,
    ) -> None:
        # fail where the URL is given, naming the extra, not at the first publish
        scheme = url.partition("://")[0] or "redis"
        require("redis.asyncio", feature=f"a {scheme}:// URL (events across processes)", extra="postgres")
        self.url = url
        self.prefix = prefix
        self.maxlen = maxlen
        self.ttl = ttl
        self.block_ms = block_ms
        self._redis: Redis | None = None
        self._append: Any = None
        self._outbox: asyncio.Queue[tuple[Event, int]] = asyncio.Queue()
        self._epochs: dict[str, int] = {}  # per thread: the epoch this process claimed
        self._sender: asyncio.Task[None] | None = None
        self._queued = 0  # events handed to publish()
        self._sent = 0  # of those, how many the sender has finished with
        self._progress = asyncio.Event()
        self._subscribers: dict[str, set[asyncio.Queue[Event | None]]] = {}
        self._cursors: dict[str, int] = {}  # per watched thread: the last seq read
        self._reader: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------
    async def open(self) -> RedisBroker:
        if self._redis is None:
            from redis.asyncio import Redis

            # no read timeout: XREAD BLOCK waits on purpose, and an event loop busy for
            # a few seconds (a first LiteLLM import) must not look like a dead server
            self._redis = Redis.from_url(self.url, socket_timeout=None, socket_keepalive=True, health_check_interval=30)
            await self._redis.ping()
            self._append = self._redis.register_script(_APPEND)
            self._claim = self._redis.register_script(_CLAIM)
        return self

    async def close(self) -> None:
        if self._redis is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.drain(), timeout=5)
        for task in (self._reader,):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._reader = None
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
            self._sender = None
        await self._redis.aclose()
        self._redis = None

    def _r(self) -> Redis:
        if self._redis is None:
            raise RuntimeError(f"RedisBroker({self.url}) is not open; call `await broker.open()` first")
        return self._redis

    def stream_key(self, thread_id: str) -> str:
        return f"{self.prefix}:events:{thread_id}"

    @property
    def control_channel(self) -> str:
        return f"{self.prefix}:control"

    # -- publishing --------------------------------------------------------
    def publish(self, event: Event) -> None:
        """Queue an event for its thread's stream; a single sender keeps the order."""
        self._r()
        self._queued += 1
        self._outbox.put_nowait((event, self._epochs.get(event.thread_id, -1)))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_loop())

    async def drain(self) -> None:
        """Return once every event published so far is in Redis (or given up on)."""
        target = self._queued
        while self._sent < target:
            self._progress.clear()
            await self._progress.wait()

    async def _send_loop(self) -> None:
        while True:
            batch = [await self._outbox.get()]
            while not self._outbox.empty():
                batch.append(self._outbox.get_nowait())
            await self._send(batch)
            self._sent += len(batch)
            self._progress.set()

    async def _send(self, items: list[tuple[Event, int]]) -> None:
        by_thread: dict[tuple[str, int], list[Event]] = {}
        for event, epoch in items:
            by_thread.setdefault((event.thread_id, epoch), []).append(event)
        for attempt in range(5):
            try:
                added = await asyncio.gather(*(self.append(tid, evs, epoch=ep) for (tid, ep), evs in by_thread.items()))
                for (tid, ep), n in zip(by_thread, added, strict=True):
                    if n < 0:
                        _log.warning("broker_stale_publisher", thread_id=tid, epoch=ep)
                return
            except Exception as exc:  # Redis down: retry a little, then leave the gap to storage
                _log.warning("broker_publish_failed", attempt=attempt + 1, error=str(exc))
                await asyncio.sleep(0.1 * 2**attempt)
        _log.error("broker_events_dropped", count=len(items), threads=len(by_thread))

    async def append(self, thread_id: str, events: list[Event], *, epoch: int = -1) -> int:
        """Add events (ascending seq) to the thread's stream now; returns how many
        were new, or -1 if `epoch` (>= 0) is older than the thread's (a stale publisher)."""
        if not events:
            return 0
        args: list[Any] = [self.maxlen, self.ttl, epoch]
        for event in events:
            args += [f"{event.seq}-0", event.model_dump_json()]
        return int(await self._append(keys=[self.stream_key(thread_id), self._epoch_key(thread_id)], args=args))

    def _epoch_key(self, thread_id: str) -> str:
        return f"{self.prefix}:epoch:{thread_id}"

    async def claim(self, thread_id: str) -> int:
        """Become the thread's publisher (older ones are refused from now on);
        returns the highest seq already in its stream."""
        self._r()
        epoch, last_id = await self._claim(
            keys=[self.stream_key(thread_id), self._epoch_key(thread_id)], args=[self.ttl]
        )
        self._epochs[thread_id] = int(epoch)
        return _seq(last_id)

    async def last_seq(self, thread_id: str) -> int:
        """The highest seq in the thread's stream (0 if none)."""
        entries = await self._r().xrevrange(self.stream_key(thread_id), count=1)
        return _seq(entries[0][0]) if entries else 0

    def forget(self, thread_id: str) -> None:
        """This process stopped publishing for the thread (see EventBus.detach)."""
        self._epochs.pop(thread_id, None)

    async def backfill(self, thread_id: str, storage: Storage) -> int:
        """Copy stored events the stream never got (a publisher died between its
        commit and its send) so live readers see them; returns how many."""
        stream_last = await self.last_seq(thread_id)
        missing = await storage.events_after(thread_id, stream_last)
        return await self.append(thread_id, missing, epoch=self._epochs.get(thread_id, -1))

    # -- subscribing -------------------------------------------------------
    async def subscribe(self, thread_id: str, after: int, storage: Storage) -> AsyncIterator[Event]:
        """Events with seq > after, each once, in order: replay then live.

        The stream is authoritative for what it holds; storage fills what it
        does not (trimmed, expired, or never sent because a publisher died).
        Live entries come from one reader per process (`_read_loop`), however
        many subscribers there are; a subscriber that sees a jump in seqs
        fetches what lies between.
        """
        last = after
        for replayed in await self._between(thread_id, after, None, storage):
            last = replayed.seq
            yield replayed
        queue: asyncio.Queue[Event | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._register(thread_id, queue, last)
        try:
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), self.block_ms / 1000)
                except TimeoutError:  # idle: a tail that was committed but never streamed
                    for stored in await storage.events_after(thread_id, last):
                        last = stored.seq
                        yield stored
                    continue
                if event is None:  # fell too far behind: dropped (see events.SubscriberLagging)
                    raise SubscriberLagging(thread_id, last)
                if event.seq <= last:
                    continue
                if event.seq > last + 1:
                    for missed in await self._between(thread_id, last, event.seq, storage):
                        last = missed.seq
                        yield missed
                last = event.seq
                yield event
        finally:
            self._unregister(thread_id, queue)

    async def events_between(self, thread_id: str, after: int, before: int | None) -> list[Event]:
        """What the stream holds with after < seq < before (no bound: to the end)."""
        upper = "+" if before is None else f"({before}-0"
        entries = await self._r().xrange(self.stream_key(thread_id), min=f"({after}-0", max=upper)
        return _events(entries)

    async def _between(self, thread_id: str, after: int, before: int | None, storage: Storage) -> list[Event]:
        """Events with after < seq < before (no bound: to the end) from the stream and the log."""
        found = {e.seq: e for e in await self.events_between(thread_id, after, before)}
        contiguous = bool(found) and max(found) - after == len(found)
        if not contiguous or before is not None:  # the stream lacks some: ask the log
            for stored in await storage.events_after(thread_id, after):
                if before is not None and stored.seq >= before:
                    break
                found.setdefault(stored.seq, stored)
        return [found[seq] for seq in sorted(found)]

    def _register(self, thread_id: str, queue: asyncio.Queue[Event | None], last: int) -> None:
        self._subscribers.setdefault(thread_id, set()).add(queue)
        self._cursors.setdefault(thread_id, last)
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    def _unregister(self, thread_id: str, queue: asyncio.Queue[Event | None]) -> None:
        queues = self._subscribers.get(thread_id)
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._subscribers[thread_id]
                self._cursors.pop(thread_id, None)

    async def _read_loop(self) -> None:
        """One XREAD over every watched stream, fanned out to local subscribers.
        The short block lets streams subscribed meanwhile join the next read."""
        from redis.exceptions import RedisError

        while self._subscribers:
            streams: dict[KeyT, StreamIdT] = {self.stream_key(t): f"{self._cursors[t]}-0" for t in self._subscribers}
            try:
                reply = await self._r().xread(streams, count=1000, block=_READ_BLOCK_MS)
            except (ConnectionError, OSError, RedisError) as exc:  # Redis restarting: carry on
                _log.warning("broker_read_failed", error=str(exc))
                await asyncio.sleep(0.5)
                continue
            for key, entries in _resp2_streams(reply):
                thread_id = (key.decode() if isinstance(key, bytes) else key)[len(self.prefix) + len(":events:") :]
                queues = self._subscribers.get(thread_id)
                if not queues or not entries:
                    continue
                for event in _events(entries):
                    for queue in list(queues):
                        if not offer(queue, event):
                            queues.discard(queue)  # its subscriber raises SubscriberLagging and unregisters
                self._cursors[thread_id] = max(self._cursors[thread_id], _seq(entries[-1][0]))

    # -- control -----------------------------------------------------------
    async def send_control(self, message: ControlMessage) -> int:
        """Publish a stop/force_turn; returns how many workers heard it."""
        payload = json.dumps(
            {"thread_id": message.thread_id, "action": message.action, "side": message.side, "reason": message.reason}
        )
        return int(await self._r().publish(self.control_channel, payload))

    async def stop(self, thread_id: str, reason: str = "stopped") -> int:
        return await self.send_control(ControlMessage(thread_id, "stop", reason=reason))

    async def force_turn(self, thread_id: str, side: str) -> int:
        if side not in ("a", "b"):
            raise ValueError(f"force_turn: side must be 'a' or 'b', got {side!r}")
        return await self.send_control(ControlMessage(thread_id, "force_turn", side=side))

    async def control_messages(self, ready: asyncio.Event | None = None) -> AsyncIterator[ControlMessage]:
        """Control messages as they arrive; `ready` is set once subscribed."""
        pubsub = self._r().pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(self.control_channel)
        if ready is not None:
            ready.set()
        try:
            while True:
                message = await pubsub.get_message(timeout=self.block_ms / 1000)
                if message is None:
                    continue
                try:
                    raw = json.loads(message["data"])
                    yield ControlMessage(raw["thread_id"], raw["action"], raw.get("side"), raw.get("reason"))
                except (ValueError, KeyError, TypeError):
                    _log.warning("broker_bad_control_message", data=str(message.get("data"))[:200])
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves PubSub.aclose unannotated


def _seq(entry_id: bytes | str | None) -> int:
    if entry_id is None:  # redis-py's entry type allows it; XRANGE, XREAD and the scripts always give an id
        raise ValueError("a stream entry without an id")
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


def _events(entries: StreamRangeResponse | None) -> list[Event]:
    """The events in stream entries: each carries one, as JSON, in its field `e`."""
    return [Event.model_validate_json(fields[b"e"]) for _, fields in entries or [] if fields is not None]


def _resp2_streams(reply: XReadResponse | None) -> list[list[Any]]:
    """XREAD's reply as `[[key, entries], ...]`: RESP2, the protocol `open()` connects with (None: nothing came)."""
    if isinstance(reply, dict):
        raise TypeError("RedisBroker reads RESP2 replies; this connection answers in RESP3")
    return reply or []
