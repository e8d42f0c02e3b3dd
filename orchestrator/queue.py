"""The execution queue: requests to run threads, kept in PostgreSQL.

A server enqueues ("run" a dual_ai thread, or "send" a person's text); worker
processes pick requests with `FOR UPDATE SKIP LOCKED`, so any number of them
share one table without handing a row to two of them. The thread's lease (see
orchestrator/executor.py) is what guarantees one execution per thread; the
queue only has to make sure every request is eventually picked by someone:

- a request is picked only when no earlier request of its thread is waiting and
  none is running, so a thread's messages run in the order they were sent;
- a picked request whose thread lease has lapsed (its worker died or stalled)
  is put back after `stale_after` seconds, up to `max_attempts` picks;
- `NOTIFY orchestrator_queue` on every enqueue wakes idle workers at once;
  they poll as well, so a lost notification costs latency, not work.

The table comes with the storage's migrations (postgres_0002_queue.sql).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog

if TYPE_CHECKING:
    import asyncpg

    from .storage.postgres import PostgresStorage

__all__ = ["CHANNEL", "ExecutionQueue", "ExecutionRequest", "RequestKind"]

CHANNEL = "orchestrator_queue"
RequestKind = Literal["run", "send"]
_log = structlog.get_logger("orchestrator.queue")

_PICK = """
UPDATE execution_requests SET status = 'picked', picked_by = $2, picked_at = $1, attempts = attempts + 1
WHERE id = (
    SELECT r.id FROM execution_requests r
    WHERE r.status = 'queued' AND r.available_at <= $1
      AND NOT EXISTS (
          SELECT 1 FROM execution_requests o
          WHERE o.thread_id = r.thread_id AND (o.status = 'picked' OR (o.status = 'queued' AND o.id < r.id)))
    ORDER BY r.available_at, r.id
    FOR UPDATE SKIP LOCKED
    LIMIT 1)
RETURNING *
"""

# A picked request goes back when its thread has no live lease: either the
# worker never got as far as taking it, or it stopped renewing (died, stalled).
_RECLAIM = """
UPDATE execution_requests r
SET status = CASE WHEN r.attempts >= $3 THEN 'failed' ELSE 'queued' END,
    error = CASE WHEN r.attempts >= $3 THEN 'gave up after ' || r.attempts || ' attempts' ELSE r.error END,
    available_at = $1::float8, picked_by = NULL,
    finished_at = CASE WHEN r.attempts >= $3::int THEN $1::float8 ELSE NULL END
WHERE r.status = 'picked' AND r.picked_at < $1::float8 - $2::float8
  AND NOT EXISTS (
      SELECT 1 FROM leases l WHERE l.thread_id = r.thread_id AND l.owner IS NOT NULL AND l.expires_at > $1::float8)
RETURNING r.id, r.status
"""


@dataclass(frozen=True)
class ExecutionRequest:
    id: int
    thread_id: str
    kind: RequestKind
    text: str | None
    status: str
    attempts: int
    picked_by: str | None
    picked_at: float | None
    flow_id: str | None
    error: str | None
    created_at: float

    @classmethod
    def from_row(cls, row: Any) -> ExecutionRequest:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


class ExecutionQueue:
    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        clock: Callable[[], float] = time.time,
        max_attempts: int = 5,
        pool_size: tuple[int, int] = (1, 4),
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.dsn = dsn
        self.schema = schema
        self.max_attempts = max_attempts
        self._clock = clock
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._wake = asyncio.Event()

    @classmethod
    def for_storage(cls, storage: PostgresStorage, **kwargs: Any) -> ExecutionQueue:
        """A queue in the same database and schema as `storage` (open the storage first: it migrates)."""
        return cls(storage.dsn, schema=storage.schema, **kwargs)

    # -- lifecycle ---------------------------------------------------------
    async def open(self, *, listen: bool = False) -> ExecutionQueue:
        """Connect; with `listen`, also hold a connection that wakes `wait_for_work`."""
        import asyncpg

        if self._pool is None:
            settings = {"search_path": self.schema} if self.schema else {}
            min_size, max_size = self._pool_size
            self._pool = await asyncpg.create_pool(self.dsn, min_size=min_size, max_size=max_size, server_settings=settings)
            if await self._pool.fetchval("SELECT to_regclass('execution_requests')") is None:
                await self.close()
                raise RuntimeError(
                    "execution queue: table execution_requests is missing; open a PostgresStorage on this "
                    "database first (its migrations create it)"
                )
        if listen and self._listener is None:
            self._listener = await asyncpg.connect(self.dsn)
            await self._listener.add_listener(CHANNEL, self._notified)
        return self

    async def close(self) -> None:
        if self._listener is not None:
            listener, self._listener = self._listener, None
            with contextlib.suppress(Exception):
                await listener.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def _p(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("execution queue is not open; call `await queue.open()` first")
        return self._pool

    def _notified(self, *_: Any) -> None:
        self._wake.set()

    async def wait_for_work(self, timeout: float) -> bool:
        """Sleep until an enqueue is announced or `timeout` passes; True if woken."""
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            self._wake.clear()

    # -- producing ---------------------------------------------------------
    async def enqueue(self, thread_id: str, kind: RequestKind = "run", text: str | None = None, *, delay: float = 0.0) -> int:
        """Add a request and wake the workers; returns the request id."""
        if kind not in ("run", "send"):
            raise ValueError(f"enqueue: kind must be 'run' or 'send', got {kind!r}")
        if (kind == "send") != (text is not None):
            raise ValueError("enqueue: a 'send' request needs text, a 'run' request takes none")
        now = self._clock()
        async with self._p().acquire() as conn, conn.transaction():
            request_id = await conn.fetchval(
                "INSERT INTO execution_requests (thread_id, kind, text, available_at, created_at) "
                "VALUES ($1, $2, $3, $4, $5) RETURNING id",
                thread_id, kind, text, now + delay, now,
            )  # fmt: skip
            await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, thread_id)
        return int(request_id)

    async def cancel(self, thread_id: str) -> int:
        """Withdraw a thread's requests that no worker has picked yet."""
        status = await self._p().execute(
            "UPDATE execution_requests SET status = 'cancelled', finished_at = $2 WHERE thread_id = $1 AND status = 'queued'",
            thread_id, self._clock(),
        )  # fmt: skip
        return int(status.rsplit(" ", 1)[-1])

    # -- consuming ---------------------------------------------------------
    async def pick(self, worker: str) -> ExecutionRequest | None:
        row = await self._p().fetchrow(_PICK, self._clock(), worker)
        return None if row is None else ExecutionRequest.from_row(row)

    async def set_flow(self, request_id: int, flow_id: str) -> None:
        """Record which execution serves the request, so a retry can tell it already finished.
        Not fenced by worker: whoever holds the thread's lease runs the one execution."""
        await self._p().execute("UPDATE execution_requests SET flow_id = $2 WHERE id = $1", request_id, flow_id)

    async def done(self, request_id: int, worker: str) -> bool:
        return await self._finish(request_id, worker, "done", None)

    async def fail(self, request_id: int, worker: str, error: str) -> bool:
        return await self._finish(request_id, worker, "failed", error)

    async def _finish(self, request_id: int, worker: str, status: str, error: str | None) -> bool:
        """False when the request is no longer ours (it was reclaimed): nothing changes."""
        result = await self._p().execute(
            "UPDATE execution_requests SET status = $3, error = $4, finished_at = $5 "
            "WHERE id = $1 AND picked_by = $2 AND status = 'picked'",
            request_id, worker, status, error, self._clock(),
        )  # fmt: skip
        return result.endswith(" 1")

    async def retry(self, request_id: int, worker: str, *, delay: float, count_attempt: bool = True, error: str | None = None) -> bool:
        """Put a picked request back for later (the thread was busy, or a transient failure)."""
        now = self._clock()
        result = await self._p().execute(
            "UPDATE execution_requests SET status = CASE WHEN $4::bool AND attempts >= $6::int THEN 'failed' ELSE 'queued' END, "
            "attempts = attempts - CASE WHEN $4::bool THEN 0 ELSE 1 END, available_at = $3, picked_by = NULL, error = $5 "
            "WHERE id = $1 AND picked_by = $2 AND status = 'picked'",
            request_id, worker, now + delay, count_attempt, error, self.max_attempts,
        )  # fmt: skip
        return result.endswith(" 1")

    async def reclaim(self, stale_after: float) -> int:
        """Put back requests whose worker is gone; returns how many were requeued."""
        rows = await self._p().fetch(_RECLAIM, self._clock(), stale_after, self.max_attempts)
        requeued = sum(1 for r in rows if r["status"] == "queued")
        for row in rows:
            _log.warning("request_reclaimed", request_id=row["id"], status=row["status"])
        if requeued:
            await self._p().execute("SELECT pg_notify($1, '')", CHANNEL)
        return requeued

    # -- inspection --------------------------------------------------------
    async def get(self, request_id: int) -> ExecutionRequest:
        row = await self._p().fetchrow("SELECT * FROM execution_requests WHERE id = $1", request_id)
        if row is None:
            raise KeyError(f"no execution request {request_id}")
        return ExecutionRequest.from_row(row)

    async def counts(self) -> dict[str, int]:
        rows = await self._p().fetch("SELECT status, COUNT(*) AS n FROM execution_requests GROUP BY status")
        return {r["status"]: r["n"] for r in rows}
