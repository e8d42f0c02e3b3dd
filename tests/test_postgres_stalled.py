"""A process stopped in the middle of a query keeps its row locks (PostgreSQL only).

asyncpg prepares a statement with Parse, Describe and Flush, and binds it in a second write. A
worker stopped (SIGSTOP, a frozen VM) between the two leaves its backend "active", waiting for
the client, inside a transaction that may hold a lease row: neither `statement_timeout` nor
`idle_in_transaction_session_timeout` ends it (found by tests/test_multiprocess.py's SIGSTOP worker,
which failed about one run in three under load). Here a raw wire-protocol client takes the lease
row's lock, sends Parse and Flush, and goes silent: the next lease acquisition times out on the
lock, ends that session, and the one after it takes the thread.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import AsyncIterator

import pytest
from storage_backends import PG_DSN, postgres_unreachable

from orchestrator.core.messages import ThreadRecord
from orchestrator.storage.postgres import PostgresStorage


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


async def _until_ready(reader: asyncio.StreamReader) -> None:
    while True:
        kind = await reader.readexactly(1)
        (length,) = struct.unpack("!I", await reader.readexactly(4))
        body = await reader.readexactly(length - 4)
        if kind == b"E":
            raise AssertionError(f"server error: {body!r}")
        if kind == b"Z":
            return


async def _stalled_session(schema: str, thread_id: str) -> asyncio.StreamWriter:
    """A client of ours that locks the thread's lease row, starts a query and stops."""
    reader, writer = await asyncio.open_connection("127.0.0.1", 5432)
    params = b"".join(
        f"{k}\0{v}\0".encode()
        for k, v in {"user": "postgres", "database": "test", "application_name": "orchestrator-runtime"}.items()
    )
    startup = struct.pack("!I", 196608) + params + b"\0"
    writer.write(struct.pack("!I", len(startup) + 4) + startup)
    await _until_ready(reader)
    lock = f"SET search_path = \"{schema}\"; BEGIN; SELECT token FROM leases WHERE thread_id = '{thread_id}' FOR UPDATE"
    writer.write(_message(b"Q", lock.encode() + b"\0"))
    await _until_ready(reader)
    writer.write(_message(b"P", b"\0SELECT 1\0\0\0") + _message(b"H", b""))  # Parse, Flush; no Bind, no Sync
    await writer.drain()
    await reader.readexactly(5)  # ParseComplete: the backend now waits for us, "active"
    return writer


@pytest.fixture
async def storage() -> AsyncIterator[PostgresStorage]:
    reason = await postgres_unreachable()
    if reason:
        pytest.skip(reason)
    made = PostgresStorage(PG_DSN, schema=f"test_{uuid.uuid4().hex[:16]}", lock_timeout=0.5, stalled_after=0.2)
    await made.open()
    try:
        yield made
    finally:
        import asyncpg

        await made.close()
        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{made.schema}" CASCADE')
        finally:
            await conn.close()


async def test_a_lease_row_held_by_a_stopped_client_is_freed_by_the_next_acquisition(storage: PostgresStorage) -> None:
    import asyncpg

    thread = await storage.create_thread(ThreadRecord(agent_id="duo"))
    first = await storage.acquire_lease(thread.id, "worker-1", 1.0)
    await storage.release_lease(first)
    stopped = await _stalled_session(storage.schema or "", thread.id)
    try:
        await asyncio.sleep(0.3)  # longer than stalled_after
        with pytest.raises((asyncpg.LockNotAvailableError, asyncpg.QueryCanceledError)):
            await storage.acquire_lease(thread.id, "worker-2", 1.0)  # waits lock_timeout, then ends the session
        lease = await storage.acquire_lease(thread.id, "worker-2", 1.0)
        assert lease.owner == "worker-2" and lease.token > first.token
    finally:
        stopped.close()
