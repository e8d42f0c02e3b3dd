"""Fork and rewind on PostgreSQL: coroutines run inside one transaction of the caller's connection
(`PostgresStorage.fork_thread` / `rewind_thread`). What they mean is in `history.py`."""

from __future__ import annotations

from typing import Any

from orchestrator.core.messages import ThreadRecord
from orchestrator.storage import _common as c
from orchestrator.storage.base import StorageError
from orchestrator.storage.history import AS_OF_SQL, LoggedValue, Outline, attachment_ids, check_point, outline_of

_AS_OF = AS_OF_SQL.format(p1="$1", p2="$2", false="FALSE")
_THREAD_INSERT = (
    f"INSERT INTO threads ({', '.join(c.THREAD_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(c.THREAD_COLUMNS) + 1))})"
)
_THREAD_UPDATE = (
    "UPDATE threads SET "
    + ", ".join(f"{col} = ${i}" for i, col in enumerate(c.THREAD_COLUMNS[1:], start=2))
    + " WHERE id = $1"
)
_COPIED = ", ".join(col for col in c.MESSAGE_COLUMNS if col != "thread_id")
_MESSAGES_COPY = (
    f"INSERT INTO messages (thread_id, {_COPIED}) SELECT $1, {_COPIED} FROM messages "
    "WHERE thread_id = $2 AND seq <= $3 AND NOT superseded"
)
_HISTORY_COPY = (
    "INSERT INTO value_history (thread_id, kind, key, at_seq, value, type) "
    "SELECT $1, kind, key, at_seq, value, type FROM value_history "
    "WHERE thread_id = $2 AND at_seq <= $3 AND NOT superseded ORDER BY id"
)
_FILE_COPY = (
    "INSERT INTO files (thread_id, id, name, mime_type, size, width, height, data) "
    "SELECT $1, id, name, mime_type, size, width, height, data FROM files WHERE thread_id = $2 AND id = ANY($3)"
)
_EVENT_INSERT = "INSERT INTO events (thread_id, seq, type, data, at) VALUES ($1, $2, $3, $4, $5)"
_VALUE_WRITE = (
    "INSERT INTO thread_values (thread_id, key, value) VALUES ($1, $2, $3) "
    "ON CONFLICT (thread_id, key) DO UPDATE SET value = excluded.value"
)
_ENV_WRITE = (
    "INSERT INTO env_values (scope, owner_id, name, value, type) VALUES ('thread', $1, $2, $3, $4) "
    "ON CONFLICT (scope, owner_id, name) DO UPDATE SET value = excluded.value, type = excluded.type"
)


async def outline(conn: Any, thread_id: str) -> list[Outline]:
    """The thread's messages (not superseded) as the history checks see them, oldest first."""
    if await conn.fetchval("SELECT 1 FROM threads WHERE id = $1", thread_id) is None:
        raise c.thread_not_found(thread_id)
    rows = await conn.fetch(
        "SELECT seq, role, side, depth, flow_id, tool_calls::text, tool_call_id FROM messages "
        "WHERE thread_id = $1 AND NOT superseded ORDER BY seq",
        thread_id,
    )
    return [outline_of(*row) for row in rows]


async def values_as_of(conn: Any, thread_id: str, seq: int) -> list[LoggedValue]:
    return [LoggedValue(r[0], r[1], r[2], r[3]) for r in await conn.fetch(_AS_OF, thread_id, seq)]


async def fork(conn: Any, source_id: str, at: int, fork: ThreadRecord, events: list[c.EventRow]) -> None:
    """The new thread `fork` with `source_id`'s messages up to `at`, its values and env as of `at`, and
    the files those messages refer to (copied)."""
    import asyncpg

    await conn.execute("SELECT 1 FROM threads WHERE id = $1 FOR SHARE", source_id)  # no rewind meanwhile
    check_point(await outline(conn, source_id), at, source_id, "fork")
    try:
        await conn.execute(_THREAD_INSERT, *c.thread_to_row(fork))
    except asyncpg.UniqueViolationError as exc:
        raise StorageError(f"thread already exists: {fork.id!r}") from exc
    if events:
        await conn.executemany(_EVENT_INSERT, events)
    await conn.execute(_MESSAGES_COPY, fork.id, source_id, at)
    await conn.execute(_HISTORY_COPY, fork.id, source_id, at)
    await _write_values(conn, fork.id, await values_as_of(conn, source_id, at))
    referred = await conn.fetch(
        "SELECT attachments::text FROM messages WHERE thread_id = $1 AND seq <= $2 AND NOT superseded "
        "AND attachments::text <> '[]'",
        source_id,
        at,
    )
    file_ids = list(dict.fromkeys(i for (raw,) in referred for i in attachment_ids(raw)))
    if file_ids:
        await conn.execute(_FILE_COPY, fork.id, source_id, file_ids)


async def rewind(conn: Any, thread: ThreadRecord, to: int, token: int, events: list[c.EventRow]) -> int:
    """Mark what came after message `to` superseded and put the values back as they were then; returns
    how many messages were superseded. Fenced by the lease `token` the caller holds."""
    await conn.execute("SELECT 1 FROM threads WHERE id = $1 FOR UPDATE", thread.id)
    check_point(await outline(conn, thread.id), to, thread.id, "rewind")
    row = await conn.fetchrow("SELECT owner, token, expires_at FROM leases WHERE thread_id = $1 FOR SHARE", thread.id)
    c.check_fence(thread.id, token, None if row is None else c.LeaseRow(row[0], row[1], row[2]))
    status = await conn.execute(
        "UPDATE messages SET superseded = TRUE WHERE thread_id = $1 AND seq > $2 AND NOT superseded", thread.id, to
    )
    first_later = await conn.fetchval(
        "SELECT MIN(seq) FROM events WHERE thread_id = $1 AND NOT superseded "
        "AND type IN ('message_created', 'tool_result') AND (data->>'seq')::bigint > $2",
        thread.id,
        to,
    )
    if first_later is not None:
        later = "UPDATE events SET superseded = TRUE WHERE thread_id = $1 AND seq >= $2"
        await conn.execute(later, thread.id, first_later)
    await conn.execute(
        "UPDATE value_history SET superseded = TRUE WHERE thread_id = $1 AND at_seq > $2 AND NOT superseded",
        thread.id,
        to,
    )
    await _restore_values(conn, thread.id, await values_as_of(conn, thread.id, to))
    await conn.execute(_THREAD_UPDATE, *c.thread_to_row(thread))
    if events:
        await conn.executemany(_EVENT_INSERT, events)
    return int(status.rsplit(" ", 1)[-1])


async def _write_values(conn: Any, thread_id: str, values: list[LoggedValue]) -> None:
    plain = [(thread_id, v.key, v.value) for v in values if v.kind == "value"]
    env = [(thread_id, v.key, v.value, v.type or "secret") for v in values if v.kind == "env"]
    if plain:
        await conn.executemany(_VALUE_WRITE, plain)
    if env:
        await conn.executemany(_ENV_WRITE, env)


async def _restore_values(conn: Any, thread_id: str, then: list[LoggedValue]) -> None:
    """Only what differs is written (each write is logged, stamped after the rewound point)."""
    now: dict[tuple[str, str], tuple[str, str | None]] = {
        ("value", r[0]): (r[1], None)
        for r in await conn.fetch("SELECT key, value::text FROM thread_values WHERE thread_id = $1", thread_id)
    }
    env_rows = await conn.fetch(
        "SELECT name, value, type FROM env_values WHERE scope = 'thread' AND owner_id = $1", thread_id
    )
    now |= {("env", r[0]): (r[1], r[2]) for r in env_rows}
    wanted = {(v.kind, v.key): (v.value, v.type) for v in then}
    for kind, key in now:
        if (kind, key) in wanted:
            continue
        if kind == "value":
            await conn.execute("DELETE FROM thread_values WHERE thread_id = $1 AND key = $2", thread_id, key)
        else:
            await conn.execute(
                "DELETE FROM env_values WHERE scope = 'thread' AND owner_id = $1 AND name = $2", thread_id, key
            )
    await _write_values(conn, thread_id, [v for v in then if now.get((v.kind, v.key)) != (v.value, v.type)])
