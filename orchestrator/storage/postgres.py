"""PostgreSQL storage on asyncpg: one pool, one transaction per write.

Tables live in the schema named at construction (created if missing) or in the
server's default search_path. Message seqs are assigned under a row lock on
the thread, so concurrent writers of one thread queue rather than collide;
leases are decided under `SELECT ... FOR UPDATE` on the lease row, and a fenced
commit holds that row `FOR SHARE` so no hand-over can slip in mid-commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import structlog

from orchestrator.core.extras import require
from orchestrator.core.messages import EnvType, EnvValue, Event, Message, MessagesResult, ThreadRecord
from orchestrator.core.results import AttachmentRef
from orchestrator.core.waiting import Decision, WaitingCall
from orchestrator.storage import _common as c
from orchestrator.storage import _history_postgres as history
from orchestrator.storage import waiting_store as w
from orchestrator.storage._migrations import Migration, check_sequence, load_migrations, pending
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

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_APPLICATION = "orchestrator-runtime"  # application_name of our sessions: the stalled ones we may end
_log = structlog.get_logger("orchestrator.storage.postgres")
_MSG_COLS = ", ".join(c.MESSAGE_COLUMNS)
_MSG_INSERT = (
    f"INSERT INTO messages ({_MSG_COLS}) VALUES ({', '.join(f'${i}' for i in range(1, len(c.MESSAGE_COLUMNS) + 1))})"
)
_MSG_MUTABLE = [col for col in c.MESSAGE_COLUMNS if col not in ("thread_id", "id", "seq")]
_MSG_UPDATE = (
    "UPDATE messages SET "
    + ", ".join(f"{col} = ${i}" for i, col in enumerate(_MSG_MUTABLE, start=1))
    + f" WHERE thread_id = ${len(_MSG_MUTABLE) + 1} AND id = ${len(_MSG_MUTABLE) + 2}"
)
_THREAD_INSERT = (
    f"INSERT INTO threads ({', '.join(c.THREAD_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(c.THREAD_COLUMNS) + 1))})"
)
_THREAD_UPDATE = (
    "UPDATE threads SET "
    + ", ".join(f"{col} = ${i}" for i, col in enumerate(c.THREAD_COLUMNS[1:], start=2))
    + " WHERE id = $1"
)
_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)"
)


def _redact(dsn: str) -> str:
    """The DSN without its password, fit for an error message."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", dsn)


def _affected(status: str) -> int:
    """Row count from a command tag such as 'UPDATE 1'."""
    return int(status.rsplit(" ", 1)[-1])


class PostgresStorage(Storage):
    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        clock: Callable[[], float] = time.time,
        migrations: list[Migration] | None = None,
        min_size: int = 1,
        max_size: int = 10,
        lock_timeout: float = 15.0,
        stalled_after: float = 10.0,
    ) -> None:
        # fail where the URL is given (Runtime.from_path, open_storage), naming the extra, not at open()
        require("asyncpg", feature=f"a {dsn.partition('://')[0] or 'postgresql'}:// storage URL", extra="postgres")
        if schema is not None and not _IDENT.match(schema):
            raise ValueError(f"schema must be a plain SQL identifier (letters, digits, _), got {schema!r}")
        self.dsn = dsn
        self.schema = schema
        self._clock = clock
        self._migrations = load_migrations("postgres") if migrations is None else list(migrations)
        check_sequence(self._migrations)
        self._pool_size = (min_size, max_size)
        self._pool: asyncpg.Pool | None = None
        self._lock_timeout = lock_timeout
        self._stalled_after = stalled_after  # seconds one of our sessions may wait mid-query for its client

    # -- plumbing --------------------------------------------------------------

    @property
    def _where(self) -> str:
        return f"{_redact(self.dsn)} (schema {self.schema or 'from search_path'})"

    def _p(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StorageError(f"PostgreSQL storage {self._where} is not open; call `await storage.open()` first")
        return self._pool

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        """A pooled connection; a lock wait or statement that times out on it first ends our stalled
        sessions (see `_end_stalled_sessions`), so the caller's next attempt finds the rows free."""
        import asyncpg

        async with self._p().acquire() as conn:
            try:
                yield conn
            except (asyncpg.QueryCanceledError, asyncpg.LockNotAvailableError):
                await self._end_stalled_sessions()
                raise

    async def _end_stalled_sessions(self) -> None:
        """End this database's orchestrator sessions that have waited mid-query for their client longer
        than `stalled_after`: a stopped process, whose locks nothing else would release. A healthy
        client sends its Bind right after the Describe it waits for, so it is never among them."""
        import asyncpg

        try:
            ended = await self._p().fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid() "
                "AND state = 'active' AND wait_event = 'ClientRead' "
                "AND now() - state_change > make_interval(secs => $2)",
                _APPLICATION,
                self._stalled_after,
            )
        except asyncpg.PostgresError as exc:  # e.g. not allowed to signal other backends: the lock wait stays bounded
            _log.warning("postgres_stalled_sessions_unchecked", error=str(exc))
            return
        if ended:
            _log.warning("postgres_stalled_sessions_ended", sessions=ended)

    async def open(self) -> None:
        if self._pool is not None:
            return
        import asyncpg

        # A process stopped mid-transaction (SIGSTOP, a frozen VM) keeps its row locks, the lease rows
        # included, for as long as it stays stopped. "Idle in transaction" is bounded by the server. A
        # session stopped inside an extended-protocol query is not: asyncpg prepares with Parse, Describe
        # and Flush, and a client stopped before its Bind leaves the backend "active", waiting for it, where
        # no timeout fires. Lock waits are bounded here, and any call that times out on its connection ends
        # such sessions of ours (`_connection`), named by application_name (the SIGSTOP worker test).
        settings = {
            "application_name": _APPLICATION,
            "statement_timeout": "15000",
            "idle_in_transaction_session_timeout": "5000",
            "lock_timeout": str(int(self._lock_timeout * 1000)),
        }
        if self.schema:
            settings["search_path"] = self.schema
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            except asyncpg.UniqueViolationError:
                pass  # another process created it at the same moment
            finally:
                await conn.close()
        min_size, max_size = self._pool_size
        pool = await asyncpg.create_pool(self.dsn, min_size=min_size, max_size=max_size, server_settings=settings)
        try:
            await self._migrate(pool)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def _migrate(self, pool: asyncpg.Pool) -> None:
        """Bring the schema up to date in one transaction, one migrator at a time."""
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('orchestrator-migrate:' || current_schema()))")
            await conn.execute(_VERSION_TABLE)
            current = await conn.fetchval("SELECT version FROM schema_version WHERE id = 1") or 0
            todo = pending(self._migrations, current, self._where)
            for migration in todo:
                await conn.execute(migration.sql)
            if todo:
                await conn.execute(
                    "INSERT INTO schema_version (id, version) VALUES (1, $1) "
                    "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                    todo[-1].version,
                )

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def schema_version(self) -> int:
        return await self._p().fetchval("SELECT version FROM schema_version WHERE id = 1") or 0

    # -- threads ---------------------------------------------------------------

    async def create_thread(self, thread: ThreadRecord, events: Sequence[Event] = ()) -> ThreadRecord:
        import asyncpg

        first = c.event_rows(thread.id, events, "create_thread events")
        try:
            async with self._connection() as conn, conn.transaction():
                await conn.execute(_THREAD_INSERT, *c.thread_to_row(thread))
                await _insert_events(conn, first)
        except asyncpg.UniqueViolationError as exc:
            raise StorageError(f"thread already exists: {thread.id!r}") from exc
        return thread

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        row = await self._p().fetchrow("SELECT * FROM threads WHERE id = $1", thread_id)
        if row is None:
            raise c.thread_not_found(thread_id)
        return c.thread_from_row(row)

    async def save_thread(self, thread: ThreadRecord) -> None:
        await _save_thread(self._p(), thread)

    async def list_threads(
        self, *, user_id: str | None = None, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[ThreadRecord]:
        c.check_page(limit, offset)
        rows = await self._p().fetch(
            "SELECT * FROM threads WHERE ($1::text IS NULL OR user_id = $1) AND ($2::text IS NULL OR status = $2) "
            "ORDER BY created_at, id LIMIT $3 OFFSET $4",
            user_id,
            status,
            limit,
            offset,
        )
        return [c.thread_from_row(r) for r in rows]

    # -- messages --------------------------------------------------------------

    async def append_messages(self, thread_id: str, messages: list[Message]) -> list[Message]:
        c.check_messages_belong(thread_id, messages, "append_messages")
        async with self._connection() as conn, conn.transaction():
            await _lock_thread(conn, thread_id)
            return await _insert_messages(conn, thread_id, messages)

    async def update_message(self, message: Message) -> None:
        await _update_messages(self._p(), message.thread_id, [message])

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
        # conditions spelled out (not `$2 OR NOT silent`) so the planner can use the index
        cond = "thread_id = $1"
        args: list[str | int] = [thread_id]
        if not include_silent:
            cond += " AND NOT silent"
        if not include_superseded:  # rewound past (storage/history.py)
            cond += " AND NOT superseded"
        if max_depth is not None:
            args.append(max_depth)
            cond += f" AND depth <= ${len(args)}"
        async with self._connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            await _require_thread(conn, thread_id)
            total = await conn.fetchval(f"SELECT COUNT(*) FROM messages WHERE {cond}", *args)
            rows = await conn.fetch(
                f"SELECT {_MSG_COLS} FROM messages WHERE {cond} ORDER BY seq {order.upper()} "
                f"LIMIT ${len(args) + 1} OFFSET ${len(args) + 2}",
                *args,
                limit,
                offset,
            )
        messages = [c.message_from_row(r) for r in rows]
        return MessagesResult(messages=messages, total=total, has_more=c.has_more(offset, len(messages), total))

    async def get_message(self, thread_id: str, message_id: str) -> Message:
        row = await self._p().fetchrow(
            f"SELECT {_MSG_COLS} FROM messages WHERE thread_id = $1 AND id = $2", thread_id, message_id
        )
        if row is None:
            raise c.message_not_found(thread_id, message_id)
        return c.message_from_row(row)

    # -- key-value store -------------------------------------------------------

    async def get_value(self, thread_id: str, key: str) -> Any | None:
        async with self._connection() as conn:
            await _require_thread(conn, thread_id)
            raw = await conn.fetchval(
                "SELECT value FROM thread_values WHERE thread_id = $1 AND key = $2", thread_id, key
            )
        return None if raw is None else json.loads(raw)

    async def set_value(self, thread_id: str, key: str, value: Any) -> None:
        async with self._connection() as conn, conn.transaction():
            await _require_thread(conn, thread_id)
            await conn.execute(
                "INSERT INTO thread_values (thread_id, key, value) VALUES ($1, $2, $3) "
                "ON CONFLICT (thread_id, key) DO UPDATE SET value = excluded.value",
                thread_id,
                key,
                c.dumps(value),
            )

    # -- env values ------------------------------------------------------------

    async def get_env(self, scope: Scope, owner_id: str, name: str) -> EnvValue | None:
        c.check_env_args(scope)
        row = await self._p().fetchrow(
            "SELECT name, value, type FROM env_values WHERE scope = $1 AND owner_id = $2 AND name = $3",
            scope,
            owner_id,
            name,
        )
        return None if row is None else EnvValue(name=row["name"], value=row["value"], type=row["type"])

    async def set_env(self, scope: Scope, owner_id: str, name: str, value: str, type: EnvType) -> None:
        c.check_env_args(scope, type)
        await self._p().execute(
            "INSERT INTO env_values (scope, owner_id, name, value, type) VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (scope, owner_id, name) DO UPDATE SET value = excluded.value, type = excluded.type",
            scope,
            owner_id,
            name,
            value,
            type,
        )

    async def list_env(self, scope: Scope, owner_id: str) -> list[EnvValue]:
        c.check_env_args(scope)
        rows = await self._p().fetch(
            'SELECT name, value, type FROM env_values WHERE scope = $1 AND owner_id = $2 ORDER BY name COLLATE "C"',
            scope,
            owner_id,
        )
        return [EnvValue(name=r["name"], value=r["value"], type=r["type"]) for r in rows]

    # -- files -----------------------------------------------------------------

    async def put_file(self, thread_id: str, ref: AttachmentRef, data: bytes) -> AttachmentRef:
        stored = ref.model_copy(update={"size": len(data)})
        async with self._connection() as conn, conn.transaction():
            await _require_thread(conn, thread_id)
            await conn.execute(
                "INSERT INTO files (thread_id, id, name, mime_type, size, width, height, data) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (thread_id, id) DO UPDATE SET "
                "name = excluded.name, mime_type = excluded.mime_type, size = excluded.size, "
                "width = excluded.width, height = excluded.height, data = excluded.data",
                thread_id,
                stored.id,
                stored.name,
                stored.mime_type,
                stored.size,
                stored.width,
                stored.height,
                bytes(data),
            )
        return stored

    async def get_file(self, thread_id: str, file_id: str) -> tuple[AttachmentRef, bytes]:
        row = await self._p().fetchrow("SELECT * FROM files WHERE thread_id = $1 AND id = $2", thread_id, file_id)
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

    # -- event log -------------------------------------------------------------

    async def append_events(self, events: list[Event]) -> None:
        async with self._connection() as conn, conn.transaction():
            await _insert_events(conn, [c.event_row(e) for e in events])

    async def events_after(self, thread_id: str, after: int, limit: int | None = None) -> list[Event]:
        c.check_page(limit, 0)
        async with self._connection() as conn:
            await _require_thread(conn, thread_id)
            rows = await conn.fetch(
                "SELECT * FROM events WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3", thread_id, after, limit
            )
        return [c.event_from_row(r) for r in rows]

    async def last_event_seq(self, thread_id: str) -> int:
        async with self._connection() as conn:
            await _require_thread(conn, thread_id)
            seq: int = await conn.fetchval("SELECT COALESCE(MAX(seq), 0) FROM events WHERE thread_id = $1", thread_id)
        return seq

    # -- one transaction per step ----------------------------------------------

    async def commit(self, write: StepWrite) -> list[Message]:
        events = c.check_step(write)
        async with self._connection() as conn, conn.transaction():
            await _lock_thread(conn, write.thread_id)
            if write.lease_token is not None:
                row = await _lease_row(conn, write.thread_id, "FOR SHARE")
                c.check_fence(write.thread_id, write.lease_token, row)
            stored = await _insert_messages(conn, write.thread_id, write.new_messages)
            await _update_messages(conn, write.thread_id, write.updated_messages)
            await _insert_events(conn, events + c.message_event_rows(write, stored))
            if write.thread is not None:
                await _save_thread(conn, write.thread)
        return stored

    # -- leases ----------------------------------------------------------------

    async def add_waiting_calls(self, calls: Sequence[WaitingCall]) -> None:
        if calls:
            async with self._connection() as conn, conn.transaction():
                await w.pg_add(conn, calls)

    async def waiting_calls(
        self, thread_id: str, *, open_only: bool = False, call_id: str | None = None
    ) -> list[WaitingCall]:
        async with self._connection() as conn:
            return await w.pg_list(conn, thread_id, open_only, call_id)

    async def decide_waiting_call(
        self, thread_id: str, call_id: str, position: int, decision: Decision, decided_at: float
    ) -> bool:
        async with self._connection() as conn:
            return await w.pg_decide(conn, thread_id, call_id, position, decision.model_dump_json(), decided_at)

    async def expired_waiting_calls(self, now: float, limit: int = 100) -> list[WaitingCall]:
        async with self._connection() as conn:
            return await w.pg_expired(conn, now, limit)

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> Lease:
        c.check_ttl(ttl)
        async with self._connection() as conn, conn.transaction():
            return await _acquire_lease(conn, thread_id, owner, ttl, self._clock())

    # -- time travel (storage/history.py) --------------------------------------

    async def message_outline(self, thread_id: str) -> list[Outline]:
        async with self._connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            return await history.outline(conn, thread_id)

    async def fork_thread(self, source_id: str, at: int, fork: ThreadRecord, events: Sequence[Event] = ()) -> None:
        rows = c.event_rows(fork.id, events, "fork events")
        async with self._connection() as conn, conn.transaction():
            await history.fork(conn, source_id, at, fork, rows)

    async def rewind_thread(self, thread: ThreadRecord, to: int, lease: Lease, events: Sequence[Event] = ()) -> int:
        rows = c.event_rows(thread.id, events, "rewind events")
        async with self._connection() as conn, conn.transaction():
            return await history.rewind(conn, thread, to, lease.token, rows)

    async def begin_execution(self, thread_id: str, owner: str, ttl: float) -> ExecutionStart:
        """One connection and one transaction instead of three (each a round trip to the server)."""
        c.check_ttl(ttl)
        try:
            return await self._begin(thread_id, owner, ttl)
        except asyncio.CancelledError:  # the commit may have gone through: a lease nobody knows of would stay a ttl
            with contextlib.suppress(Exception):
                await asyncio.shield(self._p().execute(_RELEASE_OWNER, thread_id, owner))
            raise

    async def _begin(self, thread_id: str, owner: str, ttl: float) -> ExecutionStart:
        async with self._connection() as conn, conn.transaction():
            lease = await _acquire_lease(conn, thread_id, owner, ttl, self._clock())
            row = await conn.fetchrow("SELECT * FROM threads WHERE id = $1", thread_id)  # found by the lease above
            sql = f"SELECT {_MSG_COLS} FROM messages WHERE thread_id = $1 AND NOT superseded ORDER BY seq"
            rows = await conn.fetch(sql, thread_id)
            last_event = await conn.fetchval("SELECT COALESCE(MAX(seq), 0) FROM events WHERE thread_id = $1", thread_id)
        if row is None:
            raise c.thread_not_found(thread_id)
        return ExecutionStart(lease, c.thread_from_row(row), [c.message_from_row(r) for r in rows], last_event)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        c.check_ttl(ttl)
        async with self._connection() as conn, conn.transaction():
            c.check_renew(lease, await _lease_row(conn, lease.thread_id, "FOR UPDATE"))
            renewed = Lease(lease.thread_id, lease.owner, lease.token, self._clock() + ttl)
            await _store_lease(conn, renewed)
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        """Releasing a lease we no longer hold is a no-op: the new owner keeps it."""
        await self._p().execute(
            "UPDATE leases SET owner = NULL, expires_at = 0 WHERE thread_id = $1 AND owner = $2 AND token = $3",
            lease.thread_id,
            lease.owner,
            lease.token,
        )


# -- statements shared by the methods (conn is a connection or the pool) ---------

# A lease its execution never saw; the owner names one execution, so no other lease is freed.
_RELEASE_OWNER = "UPDATE leases SET owner = NULL, expires_at = 0 WHERE thread_id = $1 AND owner = $2"


async def _require_thread(conn: Any, thread_id: str) -> None:
    if await conn.fetchval("SELECT 1 FROM threads WHERE id = $1", thread_id) is None:
        raise c.thread_not_found(thread_id)


async def _lock_thread(conn: Any, thread_id: str) -> None:
    """Existence check that also queues other writers of this thread behind us."""
    if await conn.fetchval("SELECT 1 FROM threads WHERE id = $1 FOR UPDATE", thread_id) is None:
        raise c.thread_not_found(thread_id)


async def _save_thread(conn: Any, thread: ThreadRecord) -> None:
    if _affected(await conn.execute(_THREAD_UPDATE, *c.thread_to_row(thread))) == 0:
        raise c.thread_not_found(thread.id)


async def _insert_messages(conn: Any, thread_id: str, messages: list[Message]) -> list[Message]:
    """Call with the thread row locked, so the seqs handed out here are ours alone."""
    import asyncpg

    if not messages:
        return []
    last = await conn.fetchval("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = $1", thread_id)
    stored = [m.model_copy(update={"seq": last + i}) for i, m in enumerate(messages, start=1)]
    try:
        await conn.executemany(_MSG_INSERT, [c.message_to_row(m) for m in stored])
    except asyncpg.UniqueViolationError as exc:
        raise StorageError(f"a message id in this batch already exists in thread {thread_id!r}") from exc
    return stored


async def _update_messages(conn: Any, thread_id: str, messages: list[Message]) -> None:
    for m in messages:
        row = dict(zip(c.MESSAGE_COLUMNS, c.message_to_row(m), strict=True))
        status = await conn.execute(_MSG_UPDATE, *(row[col] for col in _MSG_MUTABLE), thread_id, m.id)
        if _affected(status) == 0:
            raise c.message_not_found(thread_id, m.id)


async def _insert_events(conn: Any, rows: list[c.EventRow]) -> None:
    """The same event already at its seq is no conflict: a commit whose answer was lost (the connection
    dropped after COMMIT) handed it back to the bus. A unique violation would abort the transaction, so
    the conflict is skipped and then checked."""
    for thread_id in dict.fromkeys(row[0] for row in rows):
        await _require_thread(conn, thread_id)
    for row in rows:
        status = await conn.execute(
            "INSERT INTO events (thread_id, seq, type, data, at) VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (thread_id, seq) DO NOTHING",
            *row,
        )
        if status == "INSERT 0 0" and not await conn.fetchval(_SAME_EVENT, *row):
            raise DuplicateEventError(f"event seq {row[1]} already exists in thread {row[0]!r}")


_SAME_EVENT = (
    "SELECT count(*) = 1 FROM events WHERE thread_id = $1 AND seq = $2 AND type = $3 AND data::text = $4 AND at = $5"
)


async def _acquire_lease(conn: Any, thread_id: str, owner: str, ttl: float, now: float) -> Lease:
    await _require_thread(conn, thread_id)
    # a never-leased thread gets a placeholder row (token 0) so there is a row to lock
    await conn.execute(
        "INSERT INTO leases (thread_id, owner, token, expires_at) VALUES ($1, NULL, 0, 0) "
        "ON CONFLICT (thread_id) DO NOTHING",
        thread_id,
    )
    lease = c.decide_acquire(thread_id, await _lease_row(conn, thread_id, "FOR UPDATE"), owner, ttl, now)
    await _store_lease(conn, lease)
    return lease


async def _lease_row(conn: Any, thread_id: str, lock: Literal["FOR UPDATE", "FOR SHARE"]) -> c.LeaseRow | None:
    row = await conn.fetchrow(f"SELECT owner, token, expires_at FROM leases WHERE thread_id = $1 {lock}", thread_id)
    return None if row is None else c.LeaseRow(row["owner"], row["token"], row["expires_at"])


async def _store_lease(conn: Any, lease: Lease) -> None:
    await conn.execute(
        "UPDATE leases SET owner = $2, token = $3, expires_at = $4 WHERE thread_id = $1",
        lease.thread_id,
        lease.owner,
        lease.token,
        lease.expires_at,
    )
