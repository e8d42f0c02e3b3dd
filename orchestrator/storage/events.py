"""The per-thread event bus: sequence numbers, live fan-out, reconnect.

Every event gets the thread's next sequence number. Durable events are written
to the thread's event log (with the step that produced them, or on their own);
high-rate ephemeral ones (`text_delta`) only go to live subscribers and a
bounded in-memory ring. A subscriber that reconnects with the last number it saw
gets the stored events after it (plus ring events still held), then the live
stream, each once and in order.

With a broker (`use_broker`, see orchestrator/storage/broker.py) every event also goes
to a cross-process stream, `subscribe` reads that stream, and `attach` re-reads
the thread's last seq each time, because another process may have published
since: several processes then share one thread's numbering, one at a time (the
lease decides which).

Events go live when they are published, before the step that stores them
commits (clients see progress at once). A message's event is numbered before
the write that stores the message and is stored by it (`prepare`): it goes
live when that write returns, and what was published meanwhile after it, so
the stream keeps the log's order. The other exception is an event that says
an execution began or is over (`SETTLING_EVENTS`): clients act on it (show
"running", close the socket, show "completed", send the next message), so it
is held back, with anything published after it, until it is in the log together
with the thread status it announces. Were it live first, a publisher dying
before that commit would leave clients told "stopped" while the thread is still
`running`, or told of a start that never happened (with a broker, the stream
would then carry it into the log, and the process that starts the thread next
would announce a second, unrelated start).

With `ORCHESTRATOR_CHECK_EVENTS=1` in the environment (the test suite sets it)
every published payload is checked against its model in `event_types.py`
first, and a wrong shape raises at the emission site. It is off by default:
`text_delta` is published per streamed chunk and the executor's loop must not
pay for a check the tests already make.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

import structlog
from pydantic_core import from_json

from orchestrator.core.event_payloads import (
    DeltaPayload,
    EmittedEventName,
    Publish,
    StreamDeltaName,
    ThreadCreatedPayload,
)
from orchestrator.core.messages import EncodedEvents, Event, Message, MessageEvents, ThreadRecord, event_of
from orchestrator.core.secrets import SecretScopes
from orchestrator.storage.base import DuplicateEventError, StaleLeaseError, StepWrite, Storage, StorageError
from orchestrator.storage.channel import Channel, entries_of, payload_json
from orchestrator.storage.fanout import SUBSCRIBER_QUEUE, Broker, SubscriberLagging, offer

__all__ = ["EPHEMERAL_EVENTS", "SETTLING_EVENTS", "SUBSCRIBER_QUEUE", "Broker", "EventBus", "SubscriberLagging"]
__all__ += ["offer"]


EPHEMERAL_EVENTS = frozenset({"text_delta", "reasoning_delta", "output_delta"})
SETTLING_EVENTS = frozenset({"execution_started", "execution_stopped", "execution_failed"})  # live once stored
MessageEventName = Literal["message_created", "tool_result"]
_log = structlog.get_logger("orchestrator.storage.events")


class _Publisher:
    """`EventBus.publisher`: built-in events on one thread, under one execution's lease."""

    __slots__ = ("_bus", "_defer", "_lease", "_thread_id")

    def __init__(self, bus: EventBus, thread_id: str, defer: bool, lease: int | None) -> None:
        self._bus, self._thread_id, self._defer, self._lease = bus, thread_id, defer, lease

    def __call__(self, type: str, data: object, /) -> None:
        self._bus._publish(self._thread_id, type, data, defer=self._defer, lease=self._lease)


class EventBus:
    def __init__(self, storage: Storage, redactor: SecretScopes, broker: Broker | None = None) -> None:
        self._storage = storage
        self._redactor = redactor
        self._channels: dict[str, Channel] = {}
        self._broker = broker
        self._fences: dict[str, int] = {}  # thread -> lease token of the execution this process runs
        self._check: Callable[[str, str, object], None] | None = None
        if os.environ.get("ORCHESTRATOR_CHECK_EVENTS") == "1":
            from orchestrator.core.event_types import check_payload

            self._check = check_payload

    def fence(self, thread_id: str, token: int) -> None:
        """Write this thread's events under `token` (its execution's lease), so a
        stale owner's late events are refused like its other writes. An execution here
        that held an older lease is stale from now on: what it left unwritten is dropped,
        as storage would refuse it under its own lease (see `publish`'s `lease`)."""
        previous = self._fences.get(thread_id)
        self._fences[thread_id] = token
        ch = self._channels.get(thread_id)
        if previous is not None and previous != token and ch is not None and ch.pending:
            _log.warning("unwritable_events_dropped", thread_id=thread_id, count=len(ch.pending), error="taken over")
            ch.pending.clear()

    def _stale(self, thread_id: str, lease: int | None) -> bool:
        """A publisher whose lease is no longer this thread's fence: its execution lost the thread."""
        return lease is not None and self._fences.get(thread_id) != lease

    def unfence(self, thread_id: str, token: int) -> None:
        """The execution holding `token` is done. A newer execution here that took the
        thread over (the old lease expired) keeps its own fence, and with it the channel."""
        if self._fences.get(thread_id) == token:
            del self._fences[thread_id]

    def use_broker(self, broker: Broker | None) -> None:
        """Fan events out across processes through `broker` (None: this process only)."""
        self._broker = broker

    async def attach(self, thread_id: str, *, new: bool = False, stored: int | None = None) -> None:
        """Load the thread's last sequence number; call before publishing.
        `new`: the thread was just created here, so it has no events yet. `stored`: the log's last seq,
        read by an execution under its lease. Without a broker nothing else tells this process that
        another one sharing the storage ran the thread since it last numbered its events (a channel
        stays while someone here watches the thread, and from its creation until its first execution)."""
        if self._broker is not None:
            await self._attach_shared(thread_id, self._broker, stored)
            return
        ch = self._channels.get(thread_id)
        if ch is None:
            last = 0 if new else stored if stored is not None else await self._storage.last_event_seq(thread_id)
            ch = self._channels.setdefault(thread_id, Channel(last))
        if stored is not None:
            if ch.pending and min(entry[0] for entry in ch.pending) <= stored:
                await self._drop_taken(thread_id, ch, stored)
            ch.seq = max(ch.seq, stored)

    async def _drop_taken(self, thread_id: str, ch: Channel, stored: int) -> None:
        """Events an earlier execution here left unwritten whose seqs the log has taken since: stored by a
        write whose answer was lost, or another process's. Carried by this execution's first commit, they
        would fail it whole; they can never be written, so they go."""
        first = min(entry[0] for entry in ch.pending)
        found = await self._storage.events_after(thread_id, first - 1, limit=stored - first + 1)
        taken = {event.seq for event in found}
        kept = [entry for entry in ch.pending if entry[0] not in taken]
        if len(kept) < len(ch.pending):
            count = len(ch.pending) - len(kept)
            _log.warning("unwritable_events_dropped", thread_id=thread_id, count=count, error="their seqs are taken")
        ch.pending = kept

    async def create_thread(self, record: ThreadRecord, data: ThreadCreatedPayload) -> ThreadRecord:
        """Store a new thread and announce it: `thread_created` goes in the thread's own insert, one
        transaction and one storage round trip (with a broker, which numbers events from storage and
        the stream, the thread is stored first and its event follows)."""
        if self._broker is not None:
            record = await self._storage.create_thread(record)
            await self.attach(record.id, new=True)
            self.publisher(record.id)("thread_created", data)
            return record
        await self.attach(record.id, new=True)
        self.publisher(record.id, defer=True)("thread_created", data)
        events = self.take_pending(record.id)
        try:
            record = await self._storage.create_thread(record, events)
        except BaseException:
            self.detach(record.id)
            raise
        return record

    async def _attach_shared(self, thread_id: str, broker: Broker, stored: int | None) -> None:
        """Continue the numbering from wherever any process left it. A publisher
        that died leaves the log and the stream uneven: stored events it never
        streamed go to the stream, durable events it streamed but never stored
        go to the log, so both hold what live clients saw."""
        streamed = await broker.claim(thread_id)
        if stored is None:  # an execution read it with its lease; a subscriber has not
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
        ch = self._channels.setdefault(thread_id, Channel(0))
        last = max(stored, streamed)
        if ch.pending and min(entry[0] for entry in ch.pending) <= last:
            await self._drop_taken(thread_id, ch, last)
        ch.seq = max(ch.seq, last)
        ch.held.clear()  # an earlier run's unsettled tail: what of it was stored is backfilled above
        ch.committed.clear()
        ch.uncertain.clear()
        ch.payloads.clear()

    def detach(self, thread_id: str) -> None:
        """Forget a thread this process stopped publishing for (another process
        may publish next, and a finished thread's ring of deltas must not stay
        in memory); kept while an execution here holds it, while it has
        subscribers, or while events are unwritten."""
        ch = self._channels.get(thread_id)
        if thread_id in self._fences:  # an execution here still publishes
            return
        if (
            ch is not None
            and not ch.subscribers
            and not ch.pending
            and not ch.held
            and not ch.writing
            and ch.flushing is None
        ):
            del self._channels[thread_id]
            self._redactor.forget(thread_id)
            if self._broker is not None:
                self._broker.forget(thread_id)

    def publisher(self, thread_id: str, *, defer: bool = False, lease: int | None = None) -> Publish:
        """Publish built-in events on `thread_id` (as `publish` does), each payload typed for its event's
        name (`event_payloads.Publish`): a wrong one is a mypy error where it is written."""
        return _Publisher(self, thread_id, defer, lease)

    def publish(
        self,
        thread_id: str,
        type: EmittedEventName,
        data: Any = None,
        *,
        defer: bool = False,
        lease: int | None = None,
    ) -> Event | None:
        """Number and fan out an event whose name is chosen at run time (`state.emit`); the runtime's own,
        built-in events go through `publisher`. Durable events are written soon after,
        or with the caller's step when `defer` is set (see `take_pending`).
        A settling event (and whatever follows it) goes out once it is stored:
        when the bus writes it, or at the next `flush` after the caller's commit.

        `lease`: the publishing execution's lease token. Once another execution in this
        process has taken the thread over, the stale one's events are dropped (None
        returned): numbered here they would be written, and streamed, as the new owner's."""
        return self._publish(thread_id, type, data, defer=defer, lease=lease)

    def _publish(self, thread_id: str, type: str, data: Any, *, defer: bool, lease: int | None) -> Event | None:
        if self._stale(thread_id, lease):
            _log.info("stale_event_dropped", thread_id=thread_id, type=type)
            return None
        ch = self._channel(thread_id)
        seq, data = self._numbered(ch, thread_id, type, data)
        at = time.time()
        try:
            payload = None if type in EPHEMERAL_EVENTS else payload_json(type, data)
        except ValueError:
            ch.seq -= 1  # refused: it takes no number, as a payload its check refuses takes none
            raise
        event = event_of(thread_id, seq, type, at, data)
        if ch.held or type in SETTLING_EVENTS:
            ch.held.append(event)
        else:
            self._go_live(ch, event, payload)
        if payload is not None:
            ch.pending.append((seq, type, at, payload))
            if not defer and ch.flushing is None:
                ch.flushing = asyncio.get_running_loop().create_task(self._flush_soon(thread_id))
        return event

    def publish_delta(
        self, thread_id: str, type: StreamDeltaName, data: DeltaPayload, *, lease: int | None = None
    ) -> None:
        """`publish` for a streamed delta (`EPHEMERAL_EVENTS`: never stored), the bus's commonest event:
        with no subscriber, broker or held event to order it behind, it goes only to the ring (for a
        subscriber that comes later), and no `Event` model is built for it."""
        if self._stale(thread_id, lease):
            return
        ch = self._channel(thread_id)
        if ch.held or ch.subscribers or self._broker is not None:
            self._publish(thread_id, type, data, defer=False, lease=lease)
            return
        seq, data = self._numbered(ch, thread_id, type, data)
        ch.ring.append(seq, type, time.time(), data)

    def _channel(self, thread_id: str) -> Channel:
        ch = self._channels.get(thread_id)
        if ch is None:
            raise RuntimeError(f"event bus: thread {thread_id} is not attached")
        return ch

    def _numbered(self, ch: Channel, thread_id: str, type: str, data: Any) -> tuple[int, Any]:
        """The event's number, and its payload with the thread's secrets redacted."""
        if self._check is not None:
            self._check(thread_id, type, data)
        ch.seq += 1
        redactor = self._redactor.for_thread(thread_id)  # this thread's secrets and global ones, no one else's
        if redactor.active:
            data = redactor.data(data)
        return ch.seq, data

    def _go_live(self, ch: Channel, event: Event, payload: bytes | None = None) -> None:
        ch.ring.append(event.seq, event.type, event.at, event.data, payload)
        if not ch.subscribers and self._broker is None:
            return
        if event.data is None and payload is not None:  # a message's event: its data decoded only for a listener
            event.data = from_json(payload)
        for queue in list(ch.subscribers):
            if not offer(queue, event):
                ch.subscribers.discard(queue)
        if self._broker is not None:
            self._broker.publish(event)

    # -- a caller's write: its pending events, its messages' events --------------
    # `prepare`, then the caller's own `await storage.commit(write)`, then `stored` or `not_stored`:
    # the caller awaits storage itself (`Services.store_messages`), so a write waiting in the SQLite
    # thread's queue holds no coroutine of the bus's.
    def prepare(self, write: StepWrite, announce: MessageEventName | None = None) -> None:
        """Give `write` the thread's pending events and, with `announce`, one such event per new message:
        numbered now and stored by the same transaction as its message (`MessageEvents`), so a message is
        never stored without its event, nor its event without it. What is published until the write
        returns waits behind them, so the stream keeps the log's order."""
        write.events = self.take_pending(write.thread_id, lease=write.lease_token)
        if announce is not None and write.new_messages:
            write.message_events = self._announce(write.thread_id, announce, write.new_messages, write.lease_token)

    def stored(self, write: StepWrite, messages: list[Message]) -> None:
        """`write` (`prepare`d) is stored, its new `messages` as storage returned them: their events go live."""
        self._settle_announced(write.thread_id, write.message_events, messages)
        self.committed(write.thread_id, write.events)

    def not_stored(self, write: StepWrite, error: BaseException) -> None:
        """`write` (`prepare`d) failed: its pending events are handed back (`unwritten`), its messages'
        events dropped, their numbers left unused. Cancelled, it may have gone through: the next flush
        looks its messages' events up."""
        if isinstance(error, Exception):
            self.unwritten(write.thread_id, write.events, error)
            self._settle_announced(write.thread_id, write.message_events, None)
        else:
            self._settle_announced(write.thread_id, write.message_events, None, uncertain=True)

    def _announce(
        self, thread_id: str, type_: MessageEventName, messages: list[Message], lease: int | None
    ) -> MessageEvents | None:
        """Number the messages' events (held: they go live once stored). None for a stale publisher,
        whose write storage refuses anyway."""
        if self._stale(thread_id, lease):
            return None
        ch = self._channel(thread_id)
        redactor = self._redactor.for_thread(thread_id)
        bodies = []
        for message in messages:  # all encoded before any takes a number: a refused one takes none
            data = message.model_dump(mode="json")
            if self._check is not None:
                self._check(thread_id, type_, data)
            bodies.append(MessageEvents.body(redactor.data(data) if redactor.active else data))
        entries: list[tuple[int, str, float, bytes]] = []
        for body in bodies:
            ch.seq += 1
            entries.append((ch.seq, type_, time.time(), body))
            ch.held.append(event_of(thread_id, ch.seq, type_, entries[-1][2], None))  # its data once stored
            ch.announcing.add(ch.seq)
        return MessageEvents(thread_id, entries)

    def _settle_announced(
        self, thread_id: str, announced: MessageEvents | None, stored: list[Message] | None, *, uncertain: bool = False
    ) -> None:
        """The write of `announced` returned: with the `stored` messages (their events go live in order),
        failed (None: they are dropped) or was cancelled (`uncertain`: the next flush looks them up)."""
        ch = self._channels.get(thread_id)
        if ch is None or announced is None:
            return
        seqs = {entry[0] for entry in announced.entries}
        ch.announcing -= seqs
        if uncertain:
            ch.uncertain |= seqs
            if ch.flushing is None:
                ch.flushing = asyncio.get_running_loop().create_task(self._flush_soon(thread_id))
            return
        if stored is None:
            ch.held = [event for event in ch.held if event.seq not in seqs]
        else:
            ch.payloads.update((seq, payload) for seq, _, _, payload in announced.rows(stored))
        self._let_out_stored(ch)

    def committed(self, thread_id: str, events: Sequence[Event]) -> None:
        """The caller's commit stored `events` (taken with `take_pending`): the next
        flush lets out what waited on them without looking them up."""
        ch = self._channels.get(thread_id)
        if ch is not None and ch.held:
            if isinstance(events, EncodedEvents):
                kinds = [(seq, type_) for seq, type_, _, _ in events.entries]
            else:
                kinds = [(e.seq, e.type) for e in events]
            ch.committed |= {seq for seq, type_ in kinds if type_ in SETTLING_EVENTS}
            self._let_out_stored(ch)

    def _let_out_stored(self, ch: Channel) -> None:
        """Held events go live up to the first one not known stored (a settling event, a message's event):
        at once, with no lookup, so what follows an execution's start is not held until the execution's end."""
        count = 0
        for event in ch.held:
            if event.seq in ch.announcing or event.seq in ch.uncertain:
                break
            if event.type in SETTLING_EVENTS and event.seq not in ch.committed:
                break
            count += 1
        ready, ch.held[:count] = ch.held[:count], []
        ch.committed -= {e.seq for e in ready}
        for event in ready:
            self._go_live(ch, event, ch.payloads.pop(event.seq, None))

    def take_pending(self, thread_id: str, *, lease: int | None = None) -> EncodedEvents:
        """Hand the unwritten durable events to a caller that writes them in its
        transaction; if that write fails, the caller hands them back (`unwritten`).
        A caller whose `lease` is stale gets none: they are the new owner's, and its
        write, refused, would drop them."""
        ch = self._channels.get(thread_id)
        if ch is None or not ch.pending or self._stale(thread_id, lease):
            return EncodedEvents(thread_id, [])
        pending, ch.pending = ch.pending, []
        return EncodedEvents(thread_id, pending)

    def unwritten(self, thread_id: str, events: Sequence[Event], error: BaseException) -> None:
        """A write of `events` (taken with `take_pending`) failed: they are pending
        again, ahead of newer ones, so the next write stores them and the log has
        no gap. A write fenced off (the lease moved on) drops them: a stale
        owner's events must not enter the new owner's log."""
        ch = self._channels.get(thread_id)
        if ch is None or not events:
            return
        if isinstance(error, (StaleLeaseError, DuplicateEventError)):  # writing them again cannot succeed
            _log.warning("unwritable_events_dropped", thread_id=thread_id, count=len(events), error=str(error))
            return
        ch.pending[:0] = entries_of(events)

    async def flush(self, thread_id: str) -> None:
        """Write what is pending (after a background write under way), let out
        what waited on being stored, and, with a broker, return once all of
        it is in the stream."""
        ch = self._channels.get(thread_id)
        if ch is not None and ch.flushing is not None:
            await asyncio.wait({ch.flushing})  # never raises; _flush_soon logs its own failure
        written: set[int] = set()
        try:
            written = await self._write_pending(thread_id)
        finally:
            await self._release(thread_id, written)
        if self._broker is not None:
            await self._broker.drain()

    async def _write_pending(self, thread_id: str) -> set[int]:
        """Write the unwritten durable events; returns their seqs."""
        events = self.take_pending(thread_id)
        if not events:
            return set()
        ch = self._channels[thread_id]
        seqs = set(events.seqs)
        ch.writing |= seqs
        try:
            token = self._fences.get(thread_id)
            if token is None:
                await self._storage.append_events(list(events))
            else:
                await self._storage.commit(StepWrite(thread_id=thread_id, events=events, lease_token=token))
        except DuplicateEventError:  # another process stored some of these seqs: the others are pending again
            first = min(seqs)
            found = await self._storage.events_after(thread_id, first - 1, limit=max(seqs) - first + 1)
            stored = {e.seq for e in found}
            ch.pending[:0] = [entry for entry in events.entries if entry[0] not in stored]
            raise
        except Exception as exc:  # cancelled: it may have committed, so it is not written again
            self.unwritten(thread_id, events, exc)
            raise
        finally:
            ch.writing -= seqs
        return seqs

    async def _release(self, thread_id: str, written: set[int]) -> None:
        """Let held events go live, in order, up to the first settling event
        whose write is still to come (pending, or being written here), or the
        first message's event whose write has not returned. One that a caller's
        commit took, or whose write was cancelled, is looked up: stored, it goes
        out; not stored, that commit failed and it is dropped (a settling event's
        thread did not settle: whoever resumes the thread announces the end)."""
        ch = self._channels.get(thread_id)
        if ch is None or not ch.held:
            return
        waiting = {entry[0] for entry in ch.pending} | ch.writing
        ready = list(
            itertools.takewhile(
                lambda e: e.seq not in ch.announcing and (e.type not in SETTLING_EVENTS or e.seq not in waiting),
                ch.held,
            )
        )
        known = written | ch.committed
        unknown = [e.seq for e in ready if e.seq in ch.uncertain or (e.type in SETTLING_EVENTS and e.seq not in known)]
        stored: dict[int, Event] = {}
        if unknown:
            found = await self._storage.events_after(thread_id, unknown[0] - 1, limit=unknown[-1] - unknown[0] + 1)
            stored = {e.seq: e for e in found}
        if len(ch.held) < len(ready) or any(a is not b for a, b in zip(ch.held, ready, strict=False)):
            return  # let out (or dropped by a new attach) while we looked
        del ch.held[: len(ready)]
        ch.committed -= {e.seq for e in ready}
        ch.uncertain -= set(unknown)
        for event in ready:
            if event.seq in unknown:
                found_event = stored.get(event.seq)
                if found_event is None or (found_event.type, found_event.at) != (event.type, event.at):
                    _log.warning("settling_event_not_stored", thread_id=thread_id, seq=event.seq, type=event.type)
                    continue
                event = found_event  # a message's event whose write was cancelled: its data as stored
            self._go_live(ch, event, ch.payloads.pop(event.seq, None))

    async def _flush_soon(self, thread_id: str) -> None:
        ch = self._channels[thread_id]
        try:
            await asyncio.sleep(0)  # let a step that is about to commit take them first
            await self._release(thread_id, await self._write_pending(thread_id))
        except Exception:  # the log must not take the executor down
            _log.exception("event_flush_failed", thread_id=thread_id)
        finally:
            ch.flushing = None

    async def subscribe(self, thread_id: str, after: int = 0) -> AsyncIterator[Event]:
        """Events with seq > after: the missed ones first, then live, each once.
        Raises SubscriberLagging when the caller falls too far behind."""
        if self._broker is not None:
            await self._storage.last_event_seq(thread_id)  # unknown thread: NotFoundError now
            async for event in self._broker.subscribe(thread_id, after, self._storage):
                yield event
            return
        await self.attach(thread_id)
        ch = self._channels[thread_id]
        queue: asyncio.Queue[Event | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        ch.subscribers.add(queue)
        try:
            last = after
            for event in await self._backlog(thread_id, after):
                if event.seq > last:
                    last = event.seq
                    yield event
            while True:
                live = await queue.get()
                if live is None:
                    raise SubscriberLagging(thread_id, last)
                if live.seq > last:
                    last = live.seq
                    yield live
        finally:
            ch.subscribers.discard(queue)
            self.detach(thread_id)  # the last one out frees an idle thread's channel

    async def _backlog(self, thread_id: str, after: int) -> list[Event]:
        ch = self._channels[thread_id]
        ring_now = ch.ring.after(thread_id, after)
        held_from = ch.held[0].seq if ch.held else None  # not live yet: the queue gets those in order
        pending_now = [e for e in EncodedEvents(thread_id, ch.pending) if held_from is None or e.seq < held_from]
        stored = await self._storage.events_after(thread_id, after)
        by_seq = {e.seq: e for e in stored}
        for e in pending_now + ring_now:
            if e.seq > after:
                by_seq.setdefault(e.seq, e)
        return [by_seq[s] for s in sorted(by_seq)]

    async def close(self) -> None:
        """Write what is pending on every thread. A thread whose events cannot be written is logged, and the
        others are still written: a runtime closing must go on to close its storage."""
        for thread_id in list(self._channels):
            try:
                await self.flush(thread_id)
            except Exception as exc:
                _log.warning("events_unwritten_at_close", thread_id=thread_id, error=str(exc))
