"""Storage suite, part 2: leases and fencing, migrations, two clients of one database (both backends)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from storage_backends import (  # noqa: F401 - fixtures
    PG_DSN,
    FakeClock,
    StorageFactory,
    contents,
    ev,
    fake_clock,
    msg,
    new_thread,
    storage,
    storage_factory,
)

from orchestrator.core.messages import ThreadRecord
from orchestrator.storage import (
    NotFoundError,
    SchemaVersionError,
    StaleLeaseError,
    StepWrite,
    Storage,
    ThreadBusyError,
)
from orchestrator.storage._migrations import Migration, load_migrations, split_statements

# -- leases ----------------------------------------------------------------------


async def test_lease_lifecycle_with_a_fake_clock(storage: Storage, fake_clock: FakeClock) -> None:
    thread = await new_thread(storage)
    t0 = fake_clock.now
    a = await storage.acquire_lease(thread.id, "A", ttl=30)
    assert (a.owner, a.expires_at) == ("A", t0 + 30)

    with pytest.raises(ThreadBusyError, match=rf"{thread.id}.*expires in 30") as busy:
        await storage.acquire_lease(thread.id, "B", ttl=30)
    assert "'A'" in str(busy.value)

    fake_clock.advance(10)
    again = await storage.acquire_lease(thread.id, "A", ttl=30)  # same owner: still its lease
    assert (again.token, again.expires_at) == (a.token, t0 + 40)
    renewed = await storage.renew_lease(again, ttl=60)
    assert (renewed.token, renewed.expires_at) == (a.token, t0 + 70)

    fake_clock.advance(59.9)
    with pytest.raises(ThreadBusyError):
        await storage.acquire_lease(thread.id, "B", ttl=30)
    fake_clock.advance(0.2)  # now expired
    b = await storage.acquire_lease(thread.id, "B", ttl=30)
    assert b.token > a.token
    with pytest.raises(StaleLeaseError, match=thread.id):
        await storage.renew_lease(renewed, ttl=30)

    await storage.release_lease(renewed)  # releasing a lost lease is a no-op ...
    with pytest.raises(ThreadBusyError):  # ... B still holds it
        await storage.acquire_lease(thread.id, "C", ttl=30)
    await storage.release_lease(b)
    with pytest.raises(StaleLeaseError):
        await storage.renew_lease(b, ttl=30)
    c = await storage.acquire_lease(thread.id, "C", ttl=30)  # free right after release
    assert c.token > b.token

    fake_clock.advance(31)  # expired, but nobody took it: the owner may still renew
    c2 = await storage.renew_lease(c, ttl=5)
    assert (c2.token, c2.expires_at) == (c.token, fake_clock.now + 5)

    fake_clock.advance(6)
    c3 = await storage.acquire_lease(thread.id, "C", ttl=5)  # same owner after expiry: a new hand-over
    assert c3.token > c.token
    with pytest.raises(ValueError, match="ttl"):
        await storage.acquire_lease(thread.id, "C", ttl=0)


async def test_a_begin_cancelled_once_its_transaction_ran_gives_the_lease_back(tmp_path: Path) -> None:
    """SQLite runs a call at once when its thread is idle and answers on the loop's next turn. A caller
    cancelled in between (a timeout around `send`, `close()` cancelling an execution's task) never saw the
    lease it took: nobody renewed or released it, and the thread refused every start for a whole ttl."""
    import asyncio

    from orchestrator.storage.sqlite import SQLiteStorage

    async with SQLiteStorage(str(tmp_path / "begin.db")) as storage:
        thread = await new_thread(storage)
        begin = asyncio.ensure_future(storage.begin_execution(thread.id, "A", ttl=30))
        await asyncio.sleep(0)  # the transaction has run; its answer waits for the loop's next turn
        assert not begin.done()
        begin.cancel()
        with pytest.raises(asyncio.CancelledError):
            await begin
        start = await storage.begin_execution(thread.id, "B", ttl=30)
        assert start.lease.owner == "B"


async def test_a_postgres_begin_cancelled_after_its_commit_gives_the_lease_back(
    storage_factory: StorageFactory,
) -> None:
    """The same on PostgreSQL: the commit went through, and the caller was cancelled before the answer
    came back (here: held after the commit, then cancelled)."""
    import asyncio

    if storage_factory.backend != "postgres":
        pytest.skip("SQLite's window is the loop's next turn: the test above")
    async with storage_factory.make() as storage:
        thread = await new_thread(storage)
        committed = asyncio.Event()
        begin = storage._begin  # type: ignore[attr-defined]

        async def held_after_the_commit(thread_id: str, owner: str, ttl: float) -> object:
            await begin(thread_id, owner, ttl)
            committed.set()
            await asyncio.Event().wait()

        storage._begin = held_after_the_commit  # type: ignore[attr-defined]
        started = asyncio.ensure_future(storage.begin_execution(thread.id, "A", ttl=30))
        await committed.wait()
        started.cancel()
        with pytest.raises(asyncio.CancelledError):
            await started
        storage._begin = begin  # type: ignore[attr-defined]
        assert (await storage.begin_execution(thread.id, "B", ttl=30)).lease.owner == "B"


async def test_an_execution_begins_with_the_lease_the_thread_and_its_whole_history(
    storage: Storage, fake_clock: FakeClock
) -> None:
    thread = await new_thread(storage)
    await storage.append_messages(thread.id, [msg(thread.id, "one"), msg(thread.id, "quiet", silent=True)])
    start = await storage.begin_execution(thread.id, "A", ttl=30)
    assert (start.lease.owner, start.lease.expires_at, start.thread.id) == ("A", fake_clock.now + 30, thread.id)
    assert [(m.content, m.seq) for m in start.history] == [("one", 1), ("quiet", 2)]
    assert start.last_event_seq == 0  # numbering goes on from the log, whoever wrote it last
    with pytest.raises(ThreadBusyError):
        await storage.begin_execution(thread.id, "B", ttl=30)
    with pytest.raises(NotFoundError, match="nope"):
        await storage.begin_execution("nope", "B", ttl=30)
    with pytest.raises(ValueError, match="ttl"):
        await storage.begin_execution(thread.id, "A", ttl=0)
    await storage.append_events([ev(thread.id, 1), ev(thread.id, 2)])
    await storage.release_lease(start.lease)
    again = await storage.begin_execution(thread.id, "B", ttl=30)
    assert again.lease.token > start.lease.token and again.last_event_seq == 2


async def test_leases_are_per_thread(storage: Storage) -> None:
    one, two = await new_thread(storage), await new_thread(storage)
    await storage.acquire_lease(one.id, "A", ttl=30)
    assert (await storage.acquire_lease(two.id, "B", ttl=30)).owner == "B"


def _contend(
    path: str, owner: str, thread_ids: list[str], start: multiprocessing.synchronize.Event, out: multiprocessing.Queue
) -> None:  # type: ignore[name-defined]
    """Child process: race for every thread's lease on the shared file."""
    import asyncio

    from orchestrator.storage.sqlite import SQLiteStorage

    async def main() -> list[tuple[str, int]]:
        won = []
        async with SQLiteStorage(path) as s:
            start.wait()
            for tid in thread_ids:
                try:
                    won.append((tid, (await s.acquire_lease(tid, owner, ttl=600)).token))
                except ThreadBusyError:
                    pass
        return won

    out.put((owner, asyncio.run(main())))


async def test_two_processes_contend_for_one_lease(tmp_path: Path) -> None:
    from orchestrator.storage.sqlite import SQLiteStorage

    path = str(tmp_path / "shared.db")
    async with SQLiteStorage(path) as s:
        thread_ids = [(await new_thread(s)).id for _ in range(30)]
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_contend, args=(path, f"proc-{i}", thread_ids, start, out)) for i in range(2)]
    for p in procs:
        p.start()
    start.set()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    winners: dict[str, list[str]] = {}
    for owner, won in results.items():
        for tid, token in won:
            assert token == 1
            winners.setdefault(tid, []).append(owner)
    assert sorted(winners) == sorted(thread_ids)  # every lease was taken ...
    assert all(len(owners) == 1 for owners in winners.values()), winners  # ... by exactly one process


async def test_storages_open_one_new_file_while_others_write(tmp_path: Path) -> None:
    """Switching a new file to WAL races with other connections (SQLite can answer
    "locked" without waiting for its busy timeout): every open must succeed."""
    import asyncio

    from orchestrator.storage.sqlite import SQLiteStorage

    async def write(store: SQLiteStorage, until: asyncio.Event) -> None:
        while not until.is_set():
            await new_thread(store)

    for round_ in range(5):
        path = str(tmp_path / f"fresh{round_}.db")
        stores = [SQLiteStorage(path) for _ in range(40)]
        done = asyncio.Event()
        first = asyncio.gather(*(s.open() for s in stores[:4]))
        rest = asyncio.gather(*(s.open() for s in stores[4:]))
        await first
        writers = [asyncio.create_task(write(s, done)) for s in stores[:4]]
        await rest
        done.set()
        await asyncio.gather(*writers)
        thread = await new_thread(stores[-1])
        assert all([(await s.get_thread(thread.id)) is not None for s in stores])
        await asyncio.gather(*(s.close() for s in stores))


# -- migrations --------------------------------------------------------------------

# a "next version" migration, valid on both backends
_V_EXTRA = """
ALTER TABLE threads ADD COLUMN tags TEXT;
CREATE TABLE audit (id INTEGER PRIMARY KEY, note TEXT);
INSERT INTO audit (id, note) VALUES (1, 'v-next');
"""


async def test_migrations_upgrade_an_older_database(storage_factory: StorageFactory) -> None:
    shipped = load_migrations(storage_factory.backend)
    async with storage_factory.make(migrations=shipped[:1]):  # a database at version 1...
        pass
    thread = ThreadRecord(agent_id="agent", user_id="u1", created_at=1.0, updated_at=1.0)
    await _write_as_version_1(storage_factory, thread)  # ...with rows in version 1's columns only
    upgraded = [*shipped, Migration(len(shipped) + 1, "add_tags", _V_EXTRA)]
    async with storage_factory.make(migrations=upgraded) as v2:
        assert await v2.schema_version() == len(upgraded)  # type: ignore[attr-defined]
        assert await v2.get_thread(thread.id) == thread
        assert await contents(v2, thread.id) == ["kept"]
        assert await v2.get_value(thread.id, "k") == [1, 2]
        await v2.append_messages(thread.id, [msg(thread.id, "after upgrade")])
    assert await storage_factory.scalar("SELECT note FROM audit WHERE id = 1") == "v-next"
    assert await storage_factory.scalar("SELECT COUNT(*) FROM threads WHERE tags IS NULL") == 1
    async with storage_factory.make(migrations=upgraded) as again:  # reopening applies nothing twice
        assert await contents(again, thread.id) == ["kept", "after upgrade"]


async def _write_as_version_1(factory: StorageFactory, thread: ThreadRecord) -> None:
    """A thread, one message and one value as version 1's code wrote them (later versions add columns)."""
    statements = [
        "INSERT INTO threads (id, agent_id, user_id, arguments, depth, status, usage, created_at, updated_at) "
        f"VALUES ('{thread.id}', 'agent', 'u1', '{{}}', 0, 'idle', '{thread.usage.model_dump_json()}', 1.0, 1.0)",
        "INSERT INTO messages (thread_id, seq, id, role, content, attachments, metadata, created_at, updated_at) "
        f"VALUES ('{thread.id}', 1, 'msg_1', 'user', 'kept', '[]', '{{}}', 1.0, 1.0)",
        f"INSERT INTO thread_values (thread_id, key, value) VALUES ('{thread.id}', 'k', '[1,2]')",
    ]
    if factory.backend == "sqlite":
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(factory.path)) as conn, conn:
            for statement in statements:
                conn.execute(statement)
        return
    import asyncpg

    conn = await asyncpg.connect(PG_DSN, server_settings={"search_path": factory.schema})
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def test_migrations_refuse_a_newer_database(storage_factory: StorageFactory) -> None:
    shipped = load_migrations(storage_factory.backend)
    newer = [*shipped, Migration(len(shipped) + 1, "add_tags", _V_EXTRA)]
    async with storage_factory.make(migrations=newer):
        pass
    old_code = storage_factory.make()
    with pytest.raises(SchemaVersionError) as err:
        await old_code.open()
    text = str(err.value)
    assert storage_factory.location in text
    assert f"schema version {len(newer)}" in text and f"up to {len(shipped)}" in text
    await old_code.close()


def test_migration_numbering_gaps_are_refused(tmp_path: Path) -> None:
    from orchestrator.storage.sqlite import SQLiteStorage

    with pytest.raises(ValueError, match="expected 2"):
        SQLiteStorage(str(tmp_path / "x.db"), migrations=[Migration(1, "a", ""), Migration(3, "b", "")])


def test_split_statements_respects_strings_and_triggers() -> None:
    script = """
    -- a comment; with a semicolon
    CREATE TABLE t (x TEXT DEFAULT 'a;b');
    CREATE TRIGGER tr AFTER INSERT ON t BEGIN UPDATE t SET x = 'c;d'; END;
    """
    parts = split_statements(script)
    assert len(parts) == 2
    assert parts[0].endswith("DEFAULT 'a;b');") and parts[1].endswith("END;")


# -- two clients of one database ---------------------------------------------------


async def test_two_clients_race_for_leases(storage_factory: StorageFactory) -> None:
    import asyncio

    async with storage_factory.make() as one, storage_factory.make() as two:
        thread_ids = [(await new_thread(one)).id for _ in range(20)]

        async def take(client: Storage, owner: str, tid: str) -> str | None:
            try:
                await client.acquire_lease(tid, owner, ttl=60)
                return owner
            except ThreadBusyError:
                return None

        for tid in thread_ids:
            winners = await asyncio.gather(take(one, "one", tid), take(two, "two", tid))
            assert sum(w is not None for w in winners) == 1, (tid, winners)


async def test_two_clients_appending_get_distinct_contiguous_seqs(storage_factory: StorageFactory) -> None:
    import asyncio

    async with storage_factory.make() as one, storage_factory.make() as two:
        thread = await new_thread(one)

        async def writer(client: Storage, name: str) -> None:
            for i in range(15):
                await client.commit(
                    StepWrite(thread.id, new_messages=[msg(thread.id, f"{name}{i}"), msg(thread.id, f"{name}{i}+")])
                )

        await asyncio.gather(writer(one, "a"), writer(two, "b"))
        page = await one.get_messages(thread.id)
    assert [m.seq for m in page.messages] == list(range(1, 61))
    by_content = {m.content: m.seq for m in page.messages}
    assert all(
        by_content[f"{n}{i}+"] == by_content[f"{n}{i}"] + 1 for n in "ab" for i in range(15)
    )  # a step's messages stay together


async def test_lease_of_a_dead_process_on_this_host_is_taken_at_once(storage: Storage, fake_clock: FakeClock) -> None:
    import os
    import subprocess

    from orchestrator.storage.owners import process_owner

    thread = await new_thread(storage)
    child = subprocess.Popen(["true"])
    child.wait()  # gone, and reaped
    here = process_owner().split(":")[0]
    dead = await storage.acquire_lease(thread.id, f"{here}:{child.pid}:0badc0de/exec1", ttl=30)
    taken = await storage.acquire_lease(thread.id, process_owner(), ttl=30)  # no TTL wait
    assert taken.token == dead.token + 1
    with pytest.raises(StaleLeaseError):  # the dead owner's writes are fenced off
        await storage.renew_lease(dead, ttl=30)

    # an owner that may be alive keeps its lease until the TTL: this very process, another host, an unknown format
    for owner in (f"{here}:{os.getpid()}:0badc0de", f"otherhost~1:{child.pid}:0badc0de", "A"):
        other = await new_thread(storage)
        await storage.acquire_lease(other.id, owner, ttl=30)
        with pytest.raises(ThreadBusyError):
            await storage.acquire_lease(other.id, process_owner(), ttl=30)
