"""Fork and rewind on SQLite: plain functions run on the storage thread inside one write transaction
(`SQLiteStorage.fork_thread` / `rewind_thread`). What they mean is in `history.py`."""

from __future__ import annotations

import sqlite3

from orchestrator.core.messages import ThreadRecord
from orchestrator.storage import _common as c
from orchestrator.storage.base import StorageError
from orchestrator.storage.history import AS_OF_SQL, LoggedValue, Outline, attachment_ids, check_point, outline_of

_AS_OF = AS_OF_SQL.format(p1="?", p2="?", false="0")
_THREAD_INSERT = (
    f"INSERT INTO threads ({', '.join(c.THREAD_COLUMNS)}) VALUES ({', '.join('?' * len(c.THREAD_COLUMNS))})"
)
_COPIED = ", ".join(col for col in c.MESSAGE_COLUMNS if col != "thread_id")
_MESSAGES_COPY = (
    f"INSERT INTO messages (thread_id, {_COPIED}) SELECT ?, {_COPIED} FROM messages "
    "WHERE thread_id = ? AND seq <= ? AND superseded = 0"
)
_HISTORY_COPY = (
    "INSERT INTO value_history (thread_id, kind, key, at_seq, value, type) "
    "SELECT ?, kind, key, at_seq, value, type FROM value_history "
    "WHERE thread_id = ? AND at_seq <= ? AND superseded = 0 ORDER BY id"
)
_FILE_COPY = (
    "INSERT INTO files (thread_id, id, name, mime_type, size, width, height, data) "
    "SELECT ?, id, name, mime_type, size, width, height, data FROM files WHERE thread_id = ? AND id = ?"
)
_EVENT_INSERT = "INSERT INTO events (thread_id, seq, type, data, at) VALUES (?, ?, ?, ?, ?)"


def outline(conn: sqlite3.Connection, thread_id: str) -> list[Outline]:
    """The thread's messages (not superseded) as the history checks see them, oldest first."""
    if conn.execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone() is None:
        raise c.thread_not_found(thread_id)
    rows = conn.execute(
        "SELECT seq, role, side, depth, flow_id, tool_calls, tool_call_id FROM messages "
        "WHERE thread_id = ? AND superseded = 0 ORDER BY seq",
        (thread_id,),
    ).fetchall()
    return [outline_of(*row) for row in rows]


def values_as_of(conn: sqlite3.Connection, thread_id: str, seq: int) -> list[LoggedValue]:
    return [LoggedValue(r[0], r[1], r[2], r[3]) for r in conn.execute(_AS_OF, (thread_id, seq))]


def fork(conn: sqlite3.Connection, source_id: str, at: int, fork: ThreadRecord, events: list[c.EventRow]) -> None:
    """The new thread `fork` with `source_id`'s messages up to `at`, its values and env as of `at`, and
    the files those messages refer to (copied)."""
    check_point(outline(conn, source_id), at, source_id, "fork")
    try:
        conn.execute(_THREAD_INSERT, c.thread_to_row(fork))
    except sqlite3.IntegrityError as exc:
        raise StorageError(f"thread already exists: {fork.id!r}") from exc
    conn.executemany(_EVENT_INSERT, events)
    conn.execute(_MESSAGES_COPY, (fork.id, source_id, at))
    conn.execute(_HISTORY_COPY, (fork.id, source_id, at))
    _write_values(conn, fork.id, values_as_of(conn, source_id, at))
    referred = conn.execute(
        "SELECT attachments FROM messages WHERE thread_id = ? AND seq <= ? AND superseded = 0 AND attachments <> '[]'",
        (source_id, at),
    )
    file_ids = dict.fromkeys(i for (raw,) in referred.fetchall() for i in attachment_ids(raw))
    conn.executemany(_FILE_COPY, [(fork.id, source_id, file_id) for file_id in file_ids])


def rewind(conn: sqlite3.Connection, thread: ThreadRecord, to: int, token: int, events: list[c.EventRow]) -> int:
    """Mark what came after message `to` superseded and put the values back as they were then; returns
    how many messages were superseded. Fenced by the lease `token` the caller holds."""
    check_point(outline(conn, thread.id), to, thread.id, "rewind")
    row = conn.execute("SELECT owner, token, expires_at FROM leases WHERE thread_id = ?", (thread.id,)).fetchone()
    c.check_fence(thread.id, token, None if row is None else c.LeaseRow(row[0], row[1], row[2]))
    superseded = conn.execute(
        "UPDATE messages SET superseded = 1 WHERE thread_id = ? AND seq > ? AND superseded = 0", (thread.id, to)
    ).rowcount
    first_later = conn.execute(
        "SELECT MIN(seq) FROM events WHERE thread_id = ? AND superseded = 0 "
        "AND type IN ('message_created', 'tool_result') AND json_extract(data, '$.seq') > ?",
        (thread.id, to),
    ).fetchone()[0]
    if first_later is not None:
        conn.execute("UPDATE events SET superseded = 1 WHERE thread_id = ? AND seq >= ?", (thread.id, first_later))
    conn.execute(
        "UPDATE value_history SET superseded = 1 WHERE thread_id = ? AND at_seq > ? AND superseded = 0",
        (thread.id, to),
    )
    _restore_values(conn, thread.id, values_as_of(conn, thread.id, to))
    values = c.thread_to_row(thread)
    columns = ", ".join(f"{col} = ?" for col in c.THREAD_COLUMNS[1:])
    conn.execute(f"UPDATE threads SET {columns} WHERE id = ?", (*values[1:], values[0]))
    conn.executemany(_EVENT_INSERT, events)
    return superseded


def _write_values(conn: sqlite3.Connection, thread_id: str, values: list[LoggedValue]) -> None:
    conn.executemany(
        "INSERT INTO thread_values (thread_id, key, value) VALUES (?, ?, ?) "
        "ON CONFLICT (thread_id, key) DO UPDATE SET value = excluded.value",
        [(thread_id, v.key, v.value) for v in values if v.kind == "value"],
    )
    conn.executemany(
        "INSERT INTO env_values (scope, owner_id, name, value, type) VALUES ('thread', ?, ?, ?, ?) "
        "ON CONFLICT (scope, owner_id, name) DO UPDATE SET value = excluded.value, type = excluded.type",
        [(thread_id, v.key, v.value, v.type or "secret") for v in values if v.kind == "env"],
    )


def _restore_values(conn: sqlite3.Connection, thread_id: str, then: list[LoggedValue]) -> None:
    """Only what differs is written (each write is logged, stamped after the rewound point)."""
    now = {("value", r[0]): (r[1], None) for r in conn.execute(_CURRENT_VALUES, (thread_id,))}
    now |= {("env", r[0]): (r[1], r[2]) for r in conn.execute(_CURRENT_ENV, (thread_id,))}
    wanted = {(v.kind, v.key): (v.value, v.type) for v in then}
    gone = [key for kind, key in now if (kind, key) not in wanted and kind == "value"]
    conn.executemany("DELETE FROM thread_values WHERE thread_id = ? AND key = ?", [(thread_id, k) for k in gone])
    gone_env = [key for kind, key in now if (kind, key) not in wanted and kind == "env"]
    conn.executemany(
        "DELETE FROM env_values WHERE scope = 'thread' AND owner_id = ? AND name = ?",
        [(thread_id, k) for k in gone_env],
    )
    _write_values(conn, thread_id, [v for v in then if now.get((v.kind, v.key)) != (v.value, v.type)])


_CURRENT_VALUES = "SELECT key, value FROM thread_values WHERE thread_id = ?"
_CURRENT_ENV = "SELECT name, value, type FROM env_values WHERE scope = 'thread' AND owner_id = ?"
