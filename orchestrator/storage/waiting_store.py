"""The `waiting_calls` table on both backends: rows, and the statements `Storage`'s waiting-call methods run.

A decision is one conditional write, `UPDATE ... WHERE decided_at IS NULL`: of two deciders racing, the
database lets exactly one change the row, and the other learns it decided nothing (False). A new record
already stored at its (thread, call, position) is kept (`ON CONFLICT DO NOTHING`): a call run again after a
crash requests the same pause again, and the first request, maybe decided by now, stays the one that counts.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from orchestrator.core.waiting import Decision, WaitingCall
from orchestrator.storage._common import Row

__all__ = [
    "COLUMNS",
    "pg_add",
    "pg_decide",
    "pg_expired",
    "pg_list",
    "sqlite_add",
    "sqlite_decide",
    "sqlite_expired",
    "sqlite_list",
    "to_row",
]

COLUMNS = (
    "thread_id",
    "call_id",
    "position",
    "kind",
    "tool",
    "arguments",
    "side",
    "payload",
    "requested_at",
    "expires_at",
    "decision",
    "decided_at",
)
_COLS = ", ".join(COLUMNS)
_ORDER = "ORDER BY requested_at, call_id, position"


def to_row(call: WaitingCall) -> tuple[Any, ...]:
    return (
        call.thread_id,
        call.call_id,
        call.position,
        call.kind,
        call.tool,
        json.dumps(call.arguments),
        call.side,
        json.dumps(call.payload),
        call.requested_at,
        call.expires_at,
        call.decision.model_dump_json() if call.decision is not None else None,
        call.decided_at,
    )


def from_row(row: Row) -> WaitingCall:
    decision = row["decision"]
    return WaitingCall(
        thread_id=row["thread_id"],
        call_id=row["call_id"],
        position=row["position"],
        kind=row["kind"],
        tool=row["tool"],
        arguments=json.loads(row["arguments"]),
        side=row["side"],
        payload=json.loads(row["payload"]),
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        decision=Decision.model_validate_json(decision) if decision is not None else None,
        decided_at=row["decided_at"],
    )


def _where(open_only: bool, call_id: str | None, mark: str) -> tuple[str, list[str]]:
    """The filter after `thread_id = <mark 1>` and the extra parameters (`mark`: '?' or '$')."""
    sql, params = "", []
    if call_id is not None:
        sql += f" AND call_id = {'?' if mark == '?' else '$2'}"
        params.append(call_id)
    if open_only:
        sql += " AND decided_at IS NULL"
    return sql, params


# -- SQLite (run on the storage's own thread, inside its transaction) ---------------


def sqlite_add(conn: sqlite3.Connection, calls: Sequence[WaitingCall]) -> None:
    marks = ", ".join("?" * len(COLUMNS))
    sql = f"INSERT INTO waiting_calls ({_COLS}) VALUES ({marks}) ON CONFLICT DO NOTHING"
    for call in calls:
        conn.execute(sql, to_row(call))


def sqlite_list(conn: sqlite3.Connection, thread_id: str, open_only: bool, call_id: str | None) -> list[WaitingCall]:
    extra, params = _where(open_only, call_id, "?")
    rows = conn.execute(f"SELECT {_COLS} FROM waiting_calls WHERE thread_id = ?{extra} {_ORDER}", [thread_id, *params])
    return [from_row(r) for r in rows.fetchall()]


def sqlite_decide(
    conn: sqlite3.Connection, thread_id: str, call_id: str, position: int, decision: str, at: float
) -> bool:
    cursor = conn.execute(
        "UPDATE waiting_calls SET decision = ?, decided_at = ? "
        "WHERE thread_id = ? AND call_id = ? AND position = ? AND decided_at IS NULL",
        (decision, at, thread_id, call_id, position),
    )
    return cursor.rowcount == 1


def sqlite_expired(conn: sqlite3.Connection, now: float, limit: int) -> list[WaitingCall]:
    rows = conn.execute(
        f"SELECT {_COLS} FROM waiting_calls WHERE decided_at IS NULL AND expires_at <= ? {_ORDER} LIMIT ?",
        (now, limit),
    )
    return [from_row(r) for r in rows.fetchall()]


# -- PostgreSQL (asyncpg connections) -----------------------------------------------


async def pg_add(conn: Any, calls: Sequence[WaitingCall]) -> None:
    marks = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 1))
    sql = f"INSERT INTO waiting_calls ({_COLS}) VALUES ({marks}) ON CONFLICT DO NOTHING"
    await conn.executemany(sql, [to_row(call) for call in calls])


async def pg_list(conn: Any, thread_id: str, open_only: bool, call_id: str | None) -> list[WaitingCall]:
    extra, params = _where(open_only, call_id, "$")
    rows = await conn.fetch(
        f"SELECT {_COLS} FROM waiting_calls WHERE thread_id = $1{extra} {_ORDER}", thread_id, *params
    )
    return [from_row(r) for r in rows]


async def pg_decide(conn: Any, thread_id: str, call_id: str, position: int, decision: str, at: float) -> bool:
    status: str = await conn.execute(
        "UPDATE waiting_calls SET decision = $1, decided_at = $2 "
        "WHERE thread_id = $3 AND call_id = $4 AND position = $5 AND decided_at IS NULL",
        decision,
        at,
        thread_id,
        call_id,
        position,
    )
    return status.rsplit(" ", 1)[-1] == "1"


async def pg_expired(conn: Any, now: float, limit: int) -> list[WaitingCall]:
    rows = await conn.fetch(
        f"SELECT {_COLS} FROM waiting_calls WHERE decided_at IS NULL AND expires_at <= $1 {_ORDER} LIMIT $2", now, limit
    )
    return [from_row(r) for r in rows]
