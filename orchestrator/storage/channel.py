"""One thread's channel on the event bus (events.py): what the bus holds of it between an event's
publication and its place in the log, and the JSON form durable events take as soon as they are published."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic_core import PydanticSerializationError, to_json

from orchestrator.core.messages import EncodedEvents, Event
from orchestrator.storage.fanout import Ring

__all__ = ["Channel", "entries_of", "payload_json"]


def payload_json(type_: str, data: object) -> bytes:
    """A durable event's data as the log stores it. Encoded when published: a payload storage could not write
    fails there, at its emission site, not in the commit of a step that had nothing to do with it."""
    try:
        return to_json(data)
    except PydanticSerializationError as exc:
        raise ValueError(f"event {type_!r}: its data cannot be stored as JSON ({exc})") from None


def entries_of(events: Sequence[Event]) -> list[tuple[int, str, float, bytes]]:
    if isinstance(events, EncodedEvents):
        return list(events.entries)
    return [(e.seq, e.type, e.at, payload_json(e.type, e.data)) for e in events]


class Channel:
    """The bus's state of one thread: its last seq, its ring and live subscribers, and the durable events
    between publication and the log (pending, held back, being written, announced with a message)."""

    __slots__ = (
        "seq",
        "ring",
        "subscribers",
        "pending",
        "flushing",
        "held",
        "writing",
        "committed",
        "announcing",
        "uncertain",
        "payloads",
    )

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.ring = Ring()
        self.subscribers: set[asyncio.Queue[Event | None]] = set()
        # durable events not yet written, as `EncodedEvents` entries: held until the next commit, mostly while a
        # model answers, as JSON they are nothing for the collector to walk (an Event and its payload were a dozen)
        self.pending: list[tuple[int, str, float, bytes]] = []
        self.flushing: asyncio.Task[None] | None = None
        self.held: list[Event] = []  # numbered, not live yet: a settling event not known stored, and what followed it
        self.writing: set[int] = set()  # seqs the bus itself is writing now
        self.committed: set[int] = set()  # held settling seqs a caller's commit is known to have stored
        # messages' events (`prepare`): numbered, held until their write returns: seqs of writes under way,
        # of writes cancelled (stored or not: the next flush looks), and the stored ones' payloads
        self.announcing: set[int] = set()
        self.uncertain: set[int] = set()
        self.payloads: dict[int, bytes] = {}
