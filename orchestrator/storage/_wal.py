"""WAL checkpoints for the SQLite storage, on a connection and a thread of their own.

SQLite's automatic checkpoint runs inside the commit that crosses its threshold, and that
commit may run on the event loop's thread (`_thread.py`). A checkpoint copies pages back
into the database and syncs the file, 2-3 ms, so it is off, and this runs one every so
many writes instead. Queued on the storage's own thread, as until 2026-12-02, a checkpoint
held up every call queued behind it and kept the next call from running at once on the
loop: about 0.5 ms per conversation, a sixth of the runtime's own work in scenario b
(`bench/storage_hops.py`). A PASSIVE checkpoint takes no write lock and waits for nobody,
so on a connection of its own it runs beside the storage's reads and writes.
"""

from __future__ import annotations

import sqlite3

from orchestrator.storage._thread import StorageThread

__all__ = ["WalCheckpointer"]


class WalCheckpointer:
    """`wrote()` after each write transaction; `await close()` when the storage closes."""

    def __init__(self, path: str, every: int) -> None:
        self._path = path
        self._every = every
        self._writes = 0
        self._thread: StorageThread | None = None  # started at the first checkpoint
        self._conn: sqlite3.Connection | None = None  # opened, used and closed on that thread only

    def wrote(self) -> None:
        """Count a write; every `every`-th queues a checkpoint (called on the event loop)."""
        self._writes += 1
        if self._writes % self._every:
            return
        if self._thread is None:
            self._thread = StorageThread("orchestrator-sqlite-wal")
        self._thread.call(self._checkpoint)  # nobody waits for it

    async def close(self) -> None:
        """Let a queued checkpoint finish, then close its connection and end its thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        await thread.call(self._close)
        thread.stop()

    def _checkpoint(self) -> None:
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            checkpoint(self._conn)
        except sqlite3.Error:
            pass  # the WAL keeps growing until the next one; nothing is lost

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def checkpoint(conn: sqlite3.Connection) -> None:
    """Copy what no reader still needs back into the database; never waits (PASSIVE)."""
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
