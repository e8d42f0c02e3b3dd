"""SQLite's storage thread: calls in order, at once when the thread is idle, never waiting on
another process's lock on the event loop, WAL checkpoints off the loop (`orchestrator/storage/_thread.py`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from storage_backends import contents, msg, new_thread


async def test_sqlite_calls_run_in_order_and_hold_little_while_queued(tmp_path: Path) -> None:
    """One thread serves the calls, in the order they were made; a call whose caller was
    cancelled before it started is skipped. A queued call holds little for the garbage collector
    (counted here with its caller's task, coroutines and message): the executor hand-off it
    replaced added a concurrent future, its condition and lock, a work item and chained callbacks."""
    import asyncio
    import gc
    import threading

    from orchestrator.storage.sqlite import SQLiteStorage

    async with SQLiteStorage(str(tmp_path / "order.db")) as s:
        thread = await new_thread(s)
        gate = threading.Event()
        blocked = s._thread.call(gate.wait, 10)  # holds the thread
        gc.collect()
        before = len(gc.get_objects())
        queued = [asyncio.ensure_future(s.append_messages(thread.id, [msg(thread.id, f"m{i}")])) for i in range(200)]
        await asyncio.sleep(0)
        gc.collect()
        per_call = (len(gc.get_objects()) - before) / len(queued)
        queued[0].cancel()
        gate.set()
        await blocked
        results = await asyncio.gather(*queued, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError)
        assert await contents(s, thread.id) == [f"m{i}" for i in range(1, 200)]
        assert per_call < 20, f"{per_call:.1f} tracked objects per queued call"  # 41 through the executor


async def test_a_sqlite_call_made_while_the_storage_thread_is_idle_runs_at_once_in_order(tmp_path: Path) -> None:
    """With nothing queued, a call runs on the caller's thread (no thread hop), answered on the loop's
    next turn; with a call ahead of it, it queues behind that one on the storage thread."""
    import threading

    from orchestrator.storage.sqlite import SQLiteStorage

    here = threading.get_ident()
    async with SQLiteStorage(str(tmp_path / "idle.db")) as s:
        thread = await new_thread(s)
        ran_at: list[int] = []
        alone = s._run(lambda conn: ran_at.append(threading.get_ident()) or threading.get_ident())
        assert ran_at == [here]  # ran already, on this thread
        assert await alone == here
        gate = threading.Event()
        blocked = s._thread.call(gate.wait, 10)
        behind = s._run(lambda conn: threading.get_ident())
        write = s.append_messages(thread.id, [msg(thread.id, "after")])
        assert not behind.done()
        gate.set()
        await blocked
        assert await behind != here
        await write
        assert await contents(s, thread.id) == ["after"]


async def test_a_write_that_finds_another_process_holding_the_lock_waits_off_the_event_loop(tmp_path: Path) -> None:
    """Attack: another process holds the database's write lock. A write made from the event loop's
    thread must not block the loop in SQLite's busy handler; it waits on the storage thread and lands
    once the lock is released, nothing lost."""
    import asyncio
    import sqlite3
    import time

    from orchestrator.storage.sqlite import SQLiteStorage

    path = str(tmp_path / "locked.db")
    async with SQLiteStorage(path, busy_timeout=5.0) as s:
        thread = await new_thread(s)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        start = time.monotonic()
        write = asyncio.ensure_future(s.append_messages(thread.id, [msg(thread.id, "waited")]))
        for _ in range(20):
            await asyncio.sleep(0)
        assert time.monotonic() - start < 2.5, "the event loop waited on another process's lock"
        assert not write.done()
        other.execute("COMMIT")
        other.close()
        await write
        assert await contents(s, thread.id) == ["waited"]


async def test_sqlite_checkpoints_the_wal_off_the_loop_and_off_the_storage_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes that run on the event loop's thread must not pay for a WAL checkpoint (it writes the
    pages back and syncs the file): SQLite's automatic one is off, and one runs every so many
    writes on a connection and thread of its own, so the WAL stays bounded."""
    import threading

    from orchestrator.storage import _wal
    from orchestrator.storage import sqlite as backend

    ran: list[tuple[str, int]] = []
    checkpoints: list[int] = []
    real = _wal.checkpoint

    def counted(conn: sqlite3.Connection) -> None:
        checkpoints.append(threading.get_ident())
        real(conn)

    monkeypatch.setattr(_wal, "checkpoint", counted)
    async with backend.SQLiteStorage(str(tmp_path / "wal.db")) as s:
        thread = await new_thread(s)
        assert await s._run(lambda conn: conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
        storage_thread = await s._thread.call(threading.get_ident)
        await s._run(lambda conn: conn.set_trace_callback(lambda sql: ran.append((sql, threading.get_ident()))))
        for i in range(2 * backend._CHECKPOINT_EVERY):
            await s.append_messages(thread.id, [msg(thread.id, f"m{i}")])
        await s._run(lambda conn: conn.set_trace_callback(None))
    assert len(checkpoints) == 2
    assert not {threading.get_ident(), storage_thread} & set(checkpoints)
    assert any(who == threading.get_ident() for sql, who in ran if sql == "COMMIT"), "no write ran on the loop"
    assert (tmp_path / "wal.db-wal").exists() is False  # the last connection out checkpointed and removed it


async def test_sqlite_calls_do_not_wait_behind_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint takes 2-3 ms (it syncs the file). Queued on the storage thread, it held up the
    calls behind it; now the writes and reads after it run at once while it is still going, and
    what they wrote is all there once it is done."""
    import asyncio
    import threading

    from orchestrator.storage import _wal
    from orchestrator.storage import sqlite as backend

    going, finish = threading.Event(), threading.Event()
    real = _wal.checkpoint

    def slow(conn: sqlite3.Connection) -> None:
        going.set()
        finish.wait(30)
        real(conn)

    monkeypatch.setattr(_wal, "checkpoint", slow)
    async with backend.SQLiteStorage(str(tmp_path / "busy.db")) as s:
        thread = await new_thread(s)

        async def write(text: str) -> None:  # each would wait for the checkpoint to end, if queued behind it
            assert len(await asyncio.wait_for(s.append_messages(thread.id, [msg(thread.id, text)]), 5)) == 1

        try:
            for i in range(backend._CHECKPOINT_EVERY - 1):  # with the thread's creation, the 100th write
                await write(f"m{i}")
            assert await asyncio.to_thread(going.wait, 10), "no checkpoint started"
            for i in range(3):
                await write(f"during{i}")
            assert (await contents(s, thread.id))[-3:] == ["during0", "during1", "during2"]
            assert not finish.is_set()
        finally:
            finish.set()
    async with backend.SQLiteStorage(str(tmp_path / "busy.db")) as s:
        assert len(await contents(s, thread.id)) == backend._CHECKPOINT_EVERY - 1 + 3


async def test_an_awaited_storage_call_yields_to_the_loop_even_when_it_runs_at_once(tmp_path: Path) -> None:
    """Awaiting a future that is already done does not yield. A call run at once on the loop's thread is
    answered on the loop's next turn, so a coroutine looping over storage calls (a writer waiting for a
    flag another task sets) cannot hold the event loop for as long as it loops."""
    import asyncio

    from orchestrator.storage.sqlite import SQLiteStorage

    async with SQLiteStorage(str(tmp_path / "turns.db")) as s:
        thread = await new_thread(s)
        others = 0

        async def other() -> None:
            nonlocal others
            while True:
                others += 1
                await asyncio.sleep(0)

        beside = asyncio.create_task(other())
        await asyncio.sleep(0)
        before = others
        for _ in range(50):
            await s.get_thread(thread.id)
        ran = others - before
        beside.cancel()
        assert ran >= 40, f"the other task ran {ran} times during 50 storage calls"
