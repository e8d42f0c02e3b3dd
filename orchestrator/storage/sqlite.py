"""SQLite storage: one file (WAL mode), one connection, one dedicated thread.

Every public method runs one plain function as a single uninterrupted call, so no
other coroutine can slip a statement into a transaction. The call runs on the
storage's own worker thread, or at once on the event loop's thread when that
worker has nothing queued (`_thread.py`: it saves two thread wake-ups per call,
most of a call's time). Writes take the lock up front (`BEGIN IMMEDIATE`), which
is what makes leases safe between processes sharing the file: on the worker the
busy timeout queues them instead of failing; on the loop's thread the busy
timeout is zero, and a write that finds the lock taken goes to the worker to wait
there, so the loop never waits on another process. No transaction ever has to
upgrade a read lock. The WAL is checkpointed every `_CHECKPOINT_EVERY` writes on a
connection and thread of its own (`_wal.py`), never inside a commit on the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random

from orchestrator.core.messages import EnvType, EnvValue, Event, Message, MessagesResult, ThreadRecord
from orchestrator.core.results import AttachmentRef
from orchestrator.core.waiting import Decision, WaitingCall
from orchestrator.storage import _common as c
from orchestrator.storage import _history_sqlite as history
from orchestrator.storage import waiting_store as w
from orchestrator.storage._migrations import Migration, check_sequence, load_migrations, pending, split_statements
from orchestrator.storage._thread import Elsewhere, StorageThread
from orchestrator.storage._wal import WalCheckpointer
from orchestrator.storage.base import (
    DuplicateEventError,
    ExecutionStart,
    Lease,
    Scope,
    StepWrite,
    Storage,
    StorageError,
)
from orchestrator.storage.history import Outline

T = TypeVar("T")

_MSG_COLS = ", ".join(c.MESSAGE_COLUMNS)
_MSG_INSERT = f"INSERT INTO messages ({_MSG_COLS}) VALUES ({', '.join('?' * len(c.MESSAGE_COLUMNS))})"
_MSG_UPDATE = (
    "UPDATE messages SET "
    + ", ".join(f"{col} = ?" for col in c.MESSAGE_COLUMNS if col not in ("thread_id", "id", "seq"))
    + " WHERE thread_id = ? AND id = ?"
)
_THREAD_INSERT = (
    f"INSERT INTO threads ({', '.join(c.THREAD_COLUMNS)}) VALUES ({', '.join('?' * len(c.THREAD_COLUMNS))})"
)
# SQLite rewrites an index entry whenever one of its columns is in an UPDATE's SET list, changed or not:
# saving a thread in one statement put both thread indexes' pages in the WAL at every step's commit (three
# of a commit's nine pages). The indexed columns are set by a second statement that matches only when one
# of them changed (at an execution's start and end).
_THREAD_INDEXED = ("user_id", "status", "created_at")
_THREAD_PLAIN = tuple(col for col in c.THREAD_COLUMNS[1:] if col not in _THREAD_INDEXED)
_THREAD_UPDATE = "UPDATE threads SET " + ", ".join(f"{col} = ?" for col in _THREAD_PLAIN) + " WHERE id = ?"
_THREAD_REINDEX = (
    "UPDATE threads SET "
    + ", ".join(f"{col} = ?" for col in _THREAD_INDEXED)
    + " WHERE id = ? AND ("
    + " OR ".join(f"{col} IS NOT ?" for col in _THREAD_INDEXED)
    + ")"
)
_PLAIN_AT = tuple(c.THREAD_COLUMNS.index(col) for col in _THREAD_PLAIN)
_INDEXED_AT = tuple(c.THREAD_COLUMNS.index(col) for col in _THREAD_INDEXED)


@contextmanager
def _transaction(conn: sqlite3.Connection, mode: Literal["DEFERRED", "IMMEDIATE"]) -> Iterator[None]:
    conn.execute(f"BEGIN {mode}")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SQLiteStorage(Storage):
    def __init__(
        self,
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        migrations: list[Migration] | None = None,
        busy_timeout: float = 30.0,
    ) -> None:
        self.path = str(path)
        self._clock = clock
        self._migrations = load_migrations("sqlite") if migrations is None else list(migrations)
        check_sequence(self._migrations)
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._thread: StorageThread | None = None
        self._waits_when_busy = True  # the connection's busy timeout: on for the worker, zero on the loop's thread
        self._checkpoints: WalCheckpointer | None = None  # a WAL file only (not `:memory:`)

    # -- plumbing --------------------------------------------------------------

    def _run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run `fn(conn, *args)` on the storage thread, or here when it is idle: the future of its result
        (a plain function, so a conversation waiting on storage holds no coroutine of it for the collector
        to walk)."""
        if self._conn is None or self._thread is None:
            raise StorageError(f"SQLite storage {self.path} is not open; call `await storage.open()` first")
        if fn is _write_tx and self._checkpoints is not None:
            self._checkpoints.wrote()
        return self._thread.call(self._on_worker, fn, *args, here=self._on_loop)

    def _on_worker(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._conn is not None
        if not self._waits_when_busy:
            self._conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            self._waits_when_busy = True
        return fn(self._conn, *args)

    def _on_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """The call on the event loop's thread: one that would wait for another process's lock goes to the worker."""
        assert self._conn is not None
        if self._waits_when_busy:
            self._conn.execute("PRAGMA busy_timeout = 0")
            self._waits_when_busy = False
        try:
            return fn(self._conn, *args)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY and not self._conn.in_transaction:
                raise Elsewhere from exc
            raise

    async def open(self) -> None:
        if self._conn is not None:
            return
        self._thread = StorageThread("orchestrator-sqlite")
        try:
            self._conn = await self._thread.call(self._connect)
        except BaseException:
            self._thread.stop()
            self._thread = None
            raise

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.row_factory = sqlite3.Row
            if self._enable_wal(conn):
                self._checkpoints = WalCheckpointer(self.path, _CHECKPOINT_EVERY)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across process crashes
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # `_wal.py` checkpoints, off the loop's thread
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> bool:
        """Switching a new file to WAL can fail at once with "database is locked" while
        another process opens it too (SQLite skips the busy handler there), so retry. False where
        there is no WAL (an in-memory database)."""
        mode = None
        for attempt in Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError) and "locked" in str(e)),
            stop=stop_after_delay(self._busy_timeout),
            wait=wait_random(0.001, 0.02),
            reraise=True,
        ):
            with attempt:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        return str(mode).lower() == "wal"

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring the schema up to date in one transaction (safe if two processes race)."""
        with _transaction(conn, "IMMEDIATE"):
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            todo = pending(self._migrations, current, self.path)
            for migration in todo:
                for statement in split_statements(migration.sql):
                    conn.execute(statement)
            if todo:
                conn.execute(f"PRAGMA user_version = {int(todo[-1].version)}")

    async def close(self) -> None:
        if self._conn is None or self._thread is None:
            return
        conn, thread, checkpoints = self._conn, self._thread, self._checkpoints
        self._conn = self._thread = self._checkpoints = None
        if checkpoints is not None:
            await checkpoints.close()
        await thread.call(conn.close)
        thread.stop()

    async def schema_version(self) -> int:
        return await self._run(lambda conn: conn.execute("PRAGMA user_version").fetchone()[0])

    # -- threads ---------------------------------------------------------------

    async def create_thread(self, thread: ThreadRecord, events: Sequence[Event] = ()) -> ThreadRecord:
        first = c.event_rows(thread.id, events, "create_thread events")
        await self._run(_write_tx, _create_thread, thread, first)
        return thread

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        return await self._run(_get_thread, thread_id)

    async def save_thread(self, thread: ThreadRecord) -> None:
        await self._run(_write_tx, _save_thread, thread)

    async def list_threads(
        self, *, user_id: str | None = None, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[ThreadRecord]:
        c.check_page(limit, offset)
        return await self._run(_list_threads, user_id, status, limit, offset)

    # -- messages --------------------------------------------------------------

    async def append_messages(self, thread_id: str, messages: list[Message]) -> list[Message]:
        c.check_messages_belong(thread_id, messages, "append_messages")
        return await self._run(_write_tx, _insert_messages, thread_id, messages)

    async def update_message(self, message: Message) -> None:
        await self._run(_write_tx, _update_messages, message.thread_id, [message])

    async def get_messages(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        offset: int = 0,
        order: Literal["asc", "desc"] = "asc",
        include_silent: bool = False,
        max_depth: int | None = None,
        include_superseded: bool = False,
    ) -> MessagesResult:
        c.check_page(limit, offset)
        c.check_order(order)
        shown = (include_silent, max_depth, include_superseded)
        return await self._run(_get_messages, thread_id, limit, offset, order, *shown)

    async def get_message(self, thread_id: str, message_id: str) -> Message:
        return await self._run(_get_message, thread_id, message_id)

    # -- key-value store -------------------------------------------------------

    async def get_value(self, thread_id: str, key: str) -> Any | None:
        return await self._run(_get_value, thread_id, key)

    async def set_value(self, thread_id: str, key: str, value: Any) -> None:
        await self._run(_write_tx, _set_value, thread_id, key, c.dumps(value))

    # -- env values ------------------------------------------------------------

    async def get_env(self, scope: Scope, owner_id: str, name: str) -> EnvValue | None:
        c.check_env_args(scope)
        rows = await self._run(_select_env, scope, owner_id, name)
        return rows[0] if rows else None

    async def set_env(self, scope: Scope, owner_id: str, name: str, value: str, type: EnvType) -> None:
        c.check_env_args(scope, type)
        await self._run(_write_tx, _set_env, scope, owner_id, name, value, type)

    async def list_env(self, scope: Scope, owner_id: str) -> list[EnvValue]:
        c.check_env_args(scope)
        return await self._run(_select_env, scope, owner_id, None)

    # -- files -----------------------------------------------------------------

    async def put_file(self, thread_id: str, ref: AttachmentRef, data: bytes) -> AttachmentRef:
        stored = ref.model_copy(update={"size": len(data)})
        await self._run(_write_tx, _put_file, thread_id, stored, bytes(data))
        return stored

    async def get_file(self, thread_id: str, file_id: str) -> tuple[AttachmentRef, bytes]:
        return await self._run(_get_file, thread_id, file_id)

    # -- event log -------------------------------------------------------------

    async def append_events(self, events: list[Event]) -> None:
        await self._run(_write_tx, _insert_events, events)

    async def events_after(self, thread_id: str, after: int, limit: int | None = None) -> list[Event]:
        c.check_page(limit, 0)
        return await self._run(_events_after, thread_id, after, limit)

    async def last_event_seq(self, thread_id: str) -> int:
        return await self._run(_last_event_seq, thread_id)

    # -- one transaction per step ----------------------------------------------

    async def commit(self, write: StepWrite) -> list[Message]:
        return await self._run(_write_tx, _commit, write)  # checked on the storage thread: see `_commit`

    # -- waiting calls (waiting_store.py) ---------------------------------------

    async def add_waiting_calls(self, calls: Sequence[WaitingCall]) -> None:
        if calls:
            await self._run(_write_tx, w.sqlite_add, list(calls))

    async def waiting_calls(
        self, thread_id: str, *, open_only: bool = False, call_id: str | None = None
    ) -> list[WaitingCall]:
        return await self._run(w.sqlite_list, thread_id, open_only, call_id)

    async def decide_waiting_call(
        self, thread_id: str, call_id: str, position: int, decision: Decision, decided_at: float
    ) -> bool:
        text = decision.model_dump_json()
        return await self._run(_write_tx, w.sqlite_decide, thread_id, call_id, position, text, decided_at)

    async def expired_waiting_calls(self, now: float, limit: int = 100) -> list[WaitingCall]:
        return await self._run(w.sqlite_expired, now, limit)

    # -- leases ----------------------------------------------------------------

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> Lease:
        c.check_ttl(ttl)
        return await self._run(_write_tx, _acquire_lease, thread_id, owner, ttl, self._clock())

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        c.check_ttl(ttl)
        return await self._run(_write_tx, _renew_lease, lease, ttl, self._clock())

    async def release_lease(self, lease: Lease) -> None:
        await self._run(_write_tx, _release_lease, lease)

    # -- time travel (storage/history.py) --------------------------------------

    async def message_outline(self, thread_id: str) -> list[Outline]:
        return await self._run(history.outline, thread_id)

    async def fork_thread(self, source_id: str, at: int, fork: ThreadRecord, events: Sequence[Event] = ()) -> None:
        await self._run(_write_tx, history.fork, source_id, at, fork, c.event_rows(fork.id, events, "fork events"))

    async def rewind_thread(self, thread: ThreadRecord, to: int, lease: Lease, events: Sequence[Event] = ()) -> int:
        rows = c.event_rows(thread.id, events, "rewind events")
        return await self._run(_write_tx, history.rewind, thread, to, lease.token, rows)

    async def begin_execution(self, thread_id: str, owner: str, ttl: float) -> ExecutionStart:
        c.check_ttl(ttl)
        begun: asyncio.Future[ExecutionStart] = self._run(
            _write_tx, _begin_execution, thread_id, owner, ttl, self._clock()
        )
        try:
            return await begun
        except asyncio.CancelledError:  # its transaction may have run: a lease nobody knows of would stay a ttl
            with contextlib.suppress(Exception):
                await asyncio.shield(self._run(_write_tx, _release_owner, thread_id, owner))
            raise


# -- the functions that run on the storage thread ------------------------------


_CHECKPOINT_EVERY = 100
"""Writes between WAL checkpoints: about SQLite's own 1,000-page default at 8-10 pages per step's commit."""


def _write_tx(conn: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
    with _transaction(conn, "IMMEDIATE"):
        return fn(conn, *args)


def _require_thread(conn: sqlite3.Connection, thread_id: str) -> None:
    if conn.execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone() is None:
        raise c.thread_not_found(thread_id)


def _create_thread(conn: sqlite3.Connection, thread: ThreadRecord, events: list[c.EventRow]) -> None:
    try:
        conn.execute(_THREAD_INSERT, c.thread_to_row(thread))
    except sqlite3.IntegrityError as exc:
        raise StorageError(f"thread already exists: {thread.id!r}") from exc
    _add_events(conn, events)


def _get_thread(conn: sqlite3.Connection, thread_id: str) -> ThreadRecord:
    row = conn.execute("SELECT * FROM threads WHERE id = ?", (thread_id,)).fetchone()
    if row is None:
        raise c.thread_not_found(thread_id)
    return c.thread_from_row(row)


def _save_thread(conn: sqlite3.Connection, thread: ThreadRecord) -> None:
    row = c.thread_to_row(thread)
    if conn.execute(_THREAD_UPDATE, (*(row[i] for i in _PLAIN_AT), row[0])).rowcount == 0:
        raise c.thread_not_found(thread.id)
    indexed = tuple(row[i] for i in _INDEXED_AT)
    conn.execute(_THREAD_REINDEX, (*indexed, row[0], *indexed))


def _list_threads(
    conn: sqlite3.Connection, user_id: str | None, status: str | None, limit: int, offset: int
) -> list[ThreadRecord]:
    where, params = ["1 = 1"], []
    if user_id is not None:
        where.append("user_id = ?")
        params.append(user_id)
    if status is not None:
        where.append("status = ?")
        params.append(status)
    sql = f"SELECT * FROM threads WHERE {' AND '.join(where)} ORDER BY created_at, id LIMIT ? OFFSET ?"
    return [c.thread_from_row(r) for r in conn.execute(sql, (*params, limit, offset))]


def _insert_messages(conn: sqlite3.Connection, thread_id: str, messages: list[Message]) -> list[Message]:
    _require_thread(conn, thread_id)
    return _add_messages(conn, thread_id, messages)


def _add_messages(conn: sqlite3.Connection, thread_id: str, messages: list[Message]) -> list[Message]:
    last = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = ?", (thread_id,)).fetchone()[0]
    stored = [m.model_copy(update={"seq": last + i}) for i, m in enumerate(messages, start=1)]
    for m in stored:
        try:
            conn.execute(_MSG_INSERT, c.message_to_row(m))
        except sqlite3.IntegrityError as exc:
            raise StorageError(f"message {m.id!r} already exists in thread {thread_id!r}") from exc
    return stored


def _update_messages(conn: sqlite3.Connection, thread_id: str, messages: list[Message]) -> None:
    for m in messages:
        row = dict(zip(c.MESSAGE_COLUMNS, c.message_to_row(m), strict=True))
        values = [v for k, v in row.items() if k not in ("thread_id", "id", "seq")]
        if conn.execute(_MSG_UPDATE, (*values, thread_id, m.id)).rowcount == 0:
            raise c.message_not_found(thread_id, m.id)


def _get_messages(
    conn: sqlite3.Connection,
    thread_id: str,
    limit: int | None,
    offset: int,
    order: str,
    include_silent: bool,
    max_depth: int | None,
    include_superseded: bool,
) -> MessagesResult:
    where = ["thread_id = ?"]
    params: list[str | int] = [thread_id]
    if not include_silent:
        where.append("silent = 0")
    if not include_superseded:  # rewound past (storage/history.py)
        where.append("superseded = 0")
    if max_depth is not None:
        where.append("depth <= ?")
        params.append(max_depth)
    cond = " AND ".join(where)
    with _transaction(conn, "DEFERRED"):  # one snapshot for the count and the page
        _require_thread(conn, thread_id)
        total = conn.execute(f"SELECT COUNT(*) FROM messages WHERE {cond}", params).fetchone()[0]
        rows = conn.execute(
            f"SELECT {_MSG_COLS} FROM messages WHERE {cond} ORDER BY seq {order.upper()} LIMIT ? OFFSET ?",
            (*params, -1 if limit is None else limit, offset),
        ).fetchall()
    messages = [c.message_from_row(r) for r in rows]
    return MessagesResult(messages=messages, total=total, has_more=c.has_more(offset, len(messages), total))


def _get_message(conn: sqlite3.Connection, thread_id: str, message_id: str) -> Message:
    row = conn.execute(
        f"SELECT {_MSG_COLS} FROM messages WHERE thread_id = ? AND id = ?", (thread_id, message_id)
    ).fetchone()
    if row is None:
        raise c.message_not_found(thread_id, message_id)
    return c.message_from_row(row)


def _get_value(conn: sqlite3.Connection, thread_id: str, key: str) -> Any | None:
    with _transaction(conn, "DEFERRED"):
        _require_thread(conn, thread_id)
        row = conn.execute(
            "SELECT value FROM thread_values WHERE thread_id = ? AND key = ?", (thread_id, key)
        ).fetchone()
    return None if row is None else json.loads(row[0])


def _set_value(conn: sqlite3.Connection, thread_id: str, key: str, value: str) -> None:
    _require_thread(conn, thread_id)
    conn.execute(
        "INSERT INTO thread_values (thread_id, key, value) VALUES (?, ?, ?) "
        "ON CONFLICT (thread_id, key) DO UPDATE SET value = excluded.value",
        (thread_id, key, value),
    )


def _select_env(conn: sqlite3.Connection, scope: str, owner_id: str, name: str | None) -> list[EnvValue]:
    sql = "SELECT name, value, type FROM env_values WHERE scope = ? AND owner_id = ?"
    params: tuple[Any, ...] = (scope, owner_id)
    if name is not None:
        sql, params = sql + " AND name = ?", (*params, name)
    rows = conn.execute(sql + " ORDER BY name", params).fetchall()
    return [EnvValue(name=r["name"], value=r["value"], type=r["type"]) for r in rows]


def _set_env(conn: sqlite3.Connection, scope: str, owner_id: str, name: str, value: str, type: str) -> None:
    conn.execute(
        "INSERT INTO env_values (scope, owner_id, name, value, type) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (scope, owner_id, name) DO UPDATE SET value = excluded.value, type = excluded.type",
        (scope, owner_id, name, value, type),
    )


def _put_file(conn: sqlite3.Connection, thread_id: str, ref: AttachmentRef, data: bytes) -> None:
    _require_thread(conn, thread_id)
    conn.execute(
        "INSERT INTO files (thread_id, id, name, mime_type, size, width, height, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id, id) DO UPDATE SET name = excluded.name, "
        "mime_type = excluded.mime_type, size = excluded.size, width = excluded.width, "
        "height = excluded.height, data = excluded.data",
        (thread_id, ref.id, ref.name, ref.mime_type, ref.size, ref.width, ref.height, data),
    )


def _get_file(conn: sqlite3.Connection, thread_id: str, file_id: str) -> tuple[AttachmentRef, bytes]:
    row = conn.execute("SELECT * FROM files WHERE thread_id = ? AND id = ?", (thread_id, file_id)).fetchone()
    if row is None:
        raise c.file_not_found(thread_id, file_id)
    ref = AttachmentRef(
        id=row["id"],
        name=row["name"],
        mime_type=row["mime_type"],
        size=row["size"],
        width=row["width"],
        height=row["height"],
    )
    return ref, bytes(row["data"])


def _insert_events(conn: sqlite3.Connection, events: list[Event]) -> None:
    for thread_id in dict.fromkeys(e.thread_id for e in events):
        _require_thread(conn, thread_id)
    _add_events(conn, [c.event_row(e) for e in events])


def _add_events(conn: sqlite3.Connection, rows: list[c.EventRow]) -> None:
    """The same event already at its seq is no conflict: a write whose answer was lost handed it back."""
    for row in rows:
        try:
            conn.execute("INSERT INTO events (thread_id, seq, type, data, at) VALUES (?, ?, ?, ?, ?)", row)
        except sqlite3.IntegrityError as exc:
            same = "SELECT 1 FROM events WHERE thread_id = ? AND seq = ? AND type = ? AND data = ? AND at = ?"
            if conn.execute(same, row).fetchone() is None:
                raise DuplicateEventError(f"event seq {row[1]} already exists in thread {row[0]!r}") from exc


def _events_after(conn: sqlite3.Connection, thread_id: str, after: int, limit: int | None) -> list[Event]:
    with _transaction(conn, "DEFERRED"):
        _require_thread(conn, thread_id)
        rows = conn.execute(
            "SELECT * FROM events WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (thread_id, after, -1 if limit is None else limit),
        ).fetchall()
    return [c.event_from_row(r) for r in rows]


def _last_event_seq(conn: sqlite3.Connection, thread_id: str) -> int:
    with _transaction(conn, "DEFERRED"):
        _require_thread(conn, thread_id)
        seq: int = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE thread_id = ?", (thread_id,)
        ).fetchone()[0]
        return seq


def _commit(conn: sqlite3.Connection, write: StepWrite) -> list[Message]:
    """One step's write, checked here on the storage thread: the bus hands its events over as rows
    (`EncodedEvents`), written as they are."""
    events = c.check_step(write)
    _require_thread(conn, write.thread_id)
    if write.lease_token is not None:
        c.check_fence(write.thread_id, write.lease_token, _lease_row(conn, write.thread_id))
    stored = _add_messages(conn, write.thread_id, write.new_messages) if write.new_messages else []
    _update_messages(conn, write.thread_id, write.updated_messages)
    _add_events(conn, events + c.message_event_rows(write, stored))  # `check_step` saw they are all this thread's
    if write.thread is not None:
        _save_thread(conn, write.thread)
    return stored


def _lease_row(conn: sqlite3.Connection, thread_id: str) -> c.LeaseRow | None:
    row = conn.execute("SELECT owner, token, expires_at FROM leases WHERE thread_id = ?", (thread_id,)).fetchone()
    return None if row is None else c.LeaseRow(row["owner"], row["token"], row["expires_at"])


def _store_lease(conn: sqlite3.Connection, lease: Lease) -> None:
    conn.execute(
        "INSERT INTO leases (thread_id, owner, token, expires_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, token = excluded.token, "
        "expires_at = excluded.expires_at",
        (lease.thread_id, lease.owner, lease.token, lease.expires_at),
    )


def _acquire_lease(conn: sqlite3.Connection, thread_id: str, owner: str, ttl: float, now: float) -> Lease:
    _require_thread(conn, thread_id)
    lease = c.decide_acquire(thread_id, _lease_row(conn, thread_id), owner, ttl, now)
    _store_lease(conn, lease)
    return lease


def _renew_lease(conn: sqlite3.Connection, lease: Lease, ttl: float, now: float) -> Lease:
    c.check_renew(lease, _lease_row(conn, lease.thread_id))
    renewed = Lease(lease.thread_id, lease.owner, lease.token, now + ttl)
    _store_lease(conn, renewed)
    return renewed


def _begin_execution(conn: sqlite3.Connection, thread_id: str, owner: str, ttl: float, now: float) -> ExecutionStart:
    lease = _acquire_lease(conn, thread_id, owner, ttl, now)
    sql = f"SELECT {_MSG_COLS} FROM messages WHERE thread_id = ? AND superseded = 0 ORDER BY seq"
    rows = conn.execute(sql, (thread_id,)).fetchall()
    last_event = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE thread_id = ?", (thread_id,))
    history = [c.message_from_row(r) for r in rows]
    return ExecutionStart(lease, _get_thread(conn, thread_id), history, last_event.fetchone()[0])


def _release_owner(conn: sqlite3.Connection, thread_id: str, owner: str) -> None:
    """A lease its execution never saw; the owner names one execution, so no other lease is freed."""
    conn.execute("UPDATE leases SET owner = NULL, expires_at = 0 WHERE thread_id = ? AND owner = ?", (thread_id, owner))


def _release_lease(conn: sqlite3.Connection, lease: Lease) -> None:
    """Releasing a lease we no longer hold is a no-op: the new owner keeps it."""
    conn.execute(
        "UPDATE leases SET owner = NULL, expires_at = 0 WHERE thread_id = ? AND owner = ? AND token = ?",
        (lease.thread_id, lease.owner, lease.token),
    )
