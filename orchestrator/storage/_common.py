"""What both backends share: row codecs, argument checks and lease rules.

Keeping these in one place is what stops SQLite and PostgreSQL from drifting:
each backend only moves rows in and out of its database.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic_core import to_json

from orchestrator.core.messages import EncodedEvents, Event, Message, ThreadRecord
from orchestrator.storage.base import Lease, NotFoundError, StaleLeaseError, StepWrite, ThreadBusyError
from orchestrator.storage.owners import owner_gone

THREAD_COLUMNS = (
    "id",
    "agent_id",
    "user_id",
    "arguments",
    "parent_id",
    "depth",
    "status",
    "execution",
    "usage",
    "created_at",
    "updated_at",
    "forked_from",
    "forked_at",
)
_THREAD_JSON = frozenset({"arguments", "execution", "usage"})

MESSAGE_COLUMNS = (
    "thread_id",
    "seq",
    "id",
    "side",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "tool_status",
    "attachments",
    "provider_blocks",
    "silent",
    "depth",
    "flow_id",
    "metadata",
    "created_at",
    "updated_at",
    "superseded",
)
_MESSAGE_JSON = frozenset({"tool_calls", "attachments", "provider_blocks", "metadata"})


class Row(Protocol):
    """A result row read by column name: `sqlite3.Row` and `asyncpg.Record` both are (neither is a Mapping)."""

    def __getitem__(self, column: str, /) -> Any: ...


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


EventRow = tuple[str, int, str, str, float]
"""An event as the log's columns: thread_id, seq, type, data (JSON), at."""


def event_row(event: Event) -> EventRow:
    """An event's row; its payload by pydantic's own encoder, the way `model_dump(mode="json")` sees it (models,
    datetimes, enums), in one pass instead of dumping the whole event and encoding it again."""
    return (event.thread_id, event.seq, event.type, _json(event.data), event.at)


def _json(value: Any) -> str:
    return to_json(value).decode()


def _row(data: dict[str, Any], columns: tuple[str, ...], json_fields: frozenset[str]) -> tuple[Any, ...]:
    """`data` (a `model_dump(mode="json")`) as column values, JSON columns encoded by pydantic's encoder."""
    return tuple((None if data[c] is None else _json(data[c])) if c in json_fields else data[c] for c in columns)


def _from_row(row: Row, columns: tuple[str, ...], json_fields: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in columns:
        value = row[c]
        out[c] = json.loads(value) if c in json_fields and isinstance(value, str) else value
    return out


def thread_to_row(thread: ThreadRecord) -> tuple[Any, ...]:
    return _row(thread.model_dump(mode="json"), THREAD_COLUMNS, _THREAD_JSON)


def thread_from_row(row: Row) -> ThreadRecord:
    return ThreadRecord.model_validate(_from_row(row, THREAD_COLUMNS, _THREAD_JSON))


# How an answer ended (`Message.reasoning`, `refusal`, `finish`) rides in the metadata column under
# one reserved key: no schema migration, and databases written before these fields read unchanged.
_ANSWER_FIELDS = ("reasoning", "refusal", "finish")
_ANSWER_KEY = "_answer"


def message_to_row(message: Message) -> tuple[Any, ...]:
    data = message.model_dump(mode="json")  # dumped once; a copy of the message with the answer cost three times this
    answer = {k: data[k] for k in _ANSWER_FIELDS if data[k] is not None}
    if answer:
        data["metadata"] = {**data["metadata"], _ANSWER_KEY: answer}
    return _row(data, MESSAGE_COLUMNS, _MESSAGE_JSON)


def message_from_row(row: Row) -> Message:
    data = _from_row(row, MESSAGE_COLUMNS, _MESSAGE_JSON)
    data["silent"] = bool(data["silent"])
    data["superseded"] = bool(data["superseded"])
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and _ANSWER_KEY in metadata:
        data.update(metadata.pop(_ANSWER_KEY))
    return Message.model_validate(data)


def event_from_row(row: Row) -> Event:
    data = row["data"]
    return Event(
        thread_id=row["thread_id"],
        seq=row["seq"],
        type=row["type"],
        data=json.loads(data) if isinstance(data, str) else data,
        at=row["at"],
    )


# -- argument checks ---------------------------------------------------------


def check_page(limit: int | None, offset: int) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")


def check_order(order: str) -> None:
    if order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")


def check_env_args(scope: str, type: str | None = None) -> None:
    if scope not in ("thread", "user"):
        raise ValueError(f"scope must be 'thread' or 'user', got {scope!r}")
    if type is not None and type not in ("text", "secret"):
        raise ValueError(f"env type must be 'text' or 'secret', got {type!r}")


def check_ttl(ttl: float) -> None:
    if not ttl > 0:
        raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")


def check_messages_belong(thread_id: str, messages: list[Message], what: str) -> None:
    for m in messages:
        if m.thread_id != thread_id:
            raise ValueError(f"{what}: message {m.id} has thread_id {m.thread_id!r}, expected {thread_id!r}")


def check_step(write: StepWrite) -> list[EventRow]:
    """Check the write belongs to one thread; returns its events' rows (not yet its messages': see
    `message_event_rows`)."""
    tid = write.thread_id
    check_messages_belong(tid, write.new_messages, "StepWrite.new_messages")
    check_messages_belong(tid, write.updated_messages, "StepWrite.updated_messages")
    if write.thread is not None and write.thread.id != tid:
        raise ValueError(f"StepWrite.thread has id {write.thread.id!r}, expected {tid!r}")
    announced = write.message_events
    if announced is not None and (announced.thread_id != tid or len(announced) != len(write.new_messages)):
        raise ValueError(
            f"StepWrite.message_events: {len(announced)} events of thread {announced.thread_id!r}, "
            f"expected one per new message ({len(write.new_messages)}) of {tid!r}"
        )
    return event_rows(tid, write.events, "StepWrite.events")


def message_event_rows(write: StepWrite, stored: list[Message]) -> list[EventRow]:
    """The rows of the events announcing `stored`, the write's new messages with their seqs given."""
    if write.message_events is None:
        return []
    tid = write.thread_id
    return [(tid, seq, type_, data.decode(), at) for seq, type_, at, data in write.message_events.rows(stored)]


def event_rows(tid: str, events: Sequence[Event], where: str) -> list[EventRow]:
    """The rows of `events`, each checked to be thread `tid`'s. The bus's `EncodedEvents` are rows already:
    written as they are, not decoded and encoded again."""
    if isinstance(events, EncodedEvents):
        if events.thread_id != tid:
            raise ValueError(f"{where}: events of thread {events.thread_id!r}, expected {tid!r}")
        return [(tid, seq, type_, data.decode(), at) for seq, type_, at, data in events.entries]
    rows = []
    for e in events:
        if e.thread_id != tid:
            raise ValueError(f"{where}: event seq {e.seq} has thread_id {e.thread_id!r}, expected {tid!r}")
        rows.append(event_row(e))
    return rows


def has_more(offset: int, returned: int, total: int) -> bool:
    return offset + returned < total


# -- errors ------------------------------------------------------------------


def thread_not_found(thread_id: str) -> NotFoundError:
    return NotFoundError(f"thread not found: {thread_id!r}")


def message_not_found(thread_id: str, message_id: str) -> NotFoundError:
    return NotFoundError(f"message not found: {message_id!r} in thread {thread_id!r}")


def file_not_found(thread_id: str, file_id: str) -> NotFoundError:
    return NotFoundError(f"file not found: {file_id!r} in thread {thread_id!r}")


# -- leases --------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseRow:
    """A thread's lease row as stored; `owner` is None once released."""

    owner: str | None
    token: int
    expires_at: float

    def live(self, now: float) -> bool:
        return self.owner is not None and self.expires_at > now


def decide_acquire(thread_id: str, row: LeaseRow | None, owner: str, ttl: float, now: float) -> Lease:
    """The lease `owner` gets, given the current row; the caller stores it.

    The same owner re-taking its live lease keeps the token (it never changed
    hands); any other hand-over (first take, after expiry or release, or from
    an owner known to be dead, see `owners.py`) bumps it, which fences off
    every write made under an older token.
    """
    expires_at = now + ttl
    if row is None:
        return Lease(thread_id, owner, 1, expires_at)
    if row.live(now):
        if row.owner == owner:
            return Lease(thread_id, owner, row.token, expires_at)
        if row.owner is not None and owner_gone(row.owner):  # crashed on this host: no need to wait out the TTL
            return Lease(thread_id, owner, row.token + 1, expires_at)
        raise ThreadBusyError(
            f"thread {thread_id!r} is busy: leased by {row.owner!r} until {row.expires_at:.3f} "
            f"(expires in {row.expires_at - now:.1f}s)",
            expires_in=row.expires_at - now,
        )
    return Lease(thread_id, owner, row.token + 1, expires_at)


def check_renew(lease: Lease, row: LeaseRow | None) -> None:
    """A lease may be renewed while nobody else took it, even just after expiry."""
    if row is None or row.owner != lease.owner or row.token != lease.token:
        raise StaleLeaseError(
            f"lease on thread {lease.thread_id!r} (owner {lease.owner!r}, token {lease.token}) was lost"
            + ("" if row is None else f"; current token is {row.token}")
        )


def check_fence(thread_id: str, token: int, row: LeaseRow | None) -> None:
    """Refuse a write made under a token that is no longer the thread's current lease."""
    if row is None or row.owner is None or row.token != token:
        current = "none" if row is None or row.owner is None else str(row.token)
        raise StaleLeaseError(
            f"write to thread {thread_id!r} fenced off: lease token {token} is stale (current: {current})"
        )
