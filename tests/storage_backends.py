"""The `storage` fixture: every storage test runs on SQLite and on PostgreSQL.

Import the fixtures into a test module to reuse them:

    from storage_backends import fake_clock, storage, storage_factory  # noqa: F401

SQLite uses a real file under tmp_path. PostgreSQL gets a fresh schema per test
(via search_path), dropped afterwards, so parallel runs never see each other;
it is skipped, with the reason, only when the server cannot be reached.
Set ORCHESTRATOR_TEST_POSTGRES_DSN to point at another server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.messages import Event, Message, ThreadRecord
from orchestrator.storage.base import Storage

PG_DSN = os.environ.get("ORCHESTRATOR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ("sqlite", "postgres")

_pg_unreachable: list[str] = []  # cached reason, filled by the first probe
_pg_probed = False


class FakeClock:
    """A clock the test moves by hand, so lease expiry needs no sleep."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def _probe_postgres() -> str | None:
    """Why PostgreSQL can't be used, or None when it can."""
    global _pg_probed
    if not _pg_probed:
        _pg_probed = True
        try:
            import asyncpg

            conn = await asyncpg.connect(PG_DSN, timeout=3)
            await conn.close()
        except Exception as exc:  # any failure to connect means: skip, saying why
            _pg_unreachable.append(f"PostgreSQL not reachable at {PG_DSN}: {type(exc).__name__}: {exc}")
    return _pg_unreachable[0] if _pg_unreachable else None


async def postgres_unreachable() -> str | None:
    """Why the test PostgreSQL can't be used (skip with it), or None when it can."""
    return await _probe_postgres()


class StorageFactory:
    """Makes storages of one backend that all point at the same database.

    `make()` can be called several times (reopen after close, other migration
    lists, two clients of one database); `scalar(sql)` reads the database
    directly, for checks the interface has no method for.
    """

    def __init__(self, backend: str, tmp_path: Path, clock: FakeClock) -> None:
        self.backend = backend
        self.clock = clock
        self.path = str(tmp_path / "storage.db")
        self.schema = f"test_{uuid.uuid4().hex[:16]}"
        self.location = self.path if backend == "sqlite" else self.schema

    def make(self, **kwargs: Any) -> Storage:
        kwargs.setdefault("clock", self.clock)
        if self.backend == "sqlite":
            from orchestrator.storage.sqlite import SQLiteStorage

            return SQLiteStorage(self.path, **kwargs)
        from orchestrator.storage.postgres import PostgresStorage

        return PostgresStorage(PG_DSN, schema=self.schema, **kwargs)

    async def scalar(self, sql: str) -> Any:
        if self.backend == "sqlite":
            import sqlite3
            from contextlib import closing

            with closing(sqlite3.connect(self.path)) as conn:
                row = conn.execute(sql).fetchone()
            return None if row is None else row[0]
        import asyncpg

        conn = await asyncpg.connect(PG_DSN, server_settings={"search_path": self.schema})
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    async def cleanup(self) -> None:
        if self.backend == "postgres":
            import asyncpg

            conn = await asyncpg.connect(PG_DSN)
            try:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
            finally:
                await conn.close()


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=BACKENDS)
async def storage_factory(
    request: pytest.FixtureRequest, tmp_path: Path, fake_clock: FakeClock
) -> AsyncIterator[StorageFactory]:
    if request.param == "postgres":
        reason = await _probe_postgres()
        if reason:
            pytest.skip(reason)
    factory = StorageFactory(request.param, tmp_path, fake_clock)
    try:
        yield factory
    finally:
        await factory.cleanup()


@pytest.fixture
async def storage(storage_factory: StorageFactory) -> AsyncIterator[Storage]:
    async with storage_factory.make() as opened:
        yield opened


# -- helpers shared by the storage test modules -----------------------------


async def new_thread(storage: Storage, **fields: object) -> ThreadRecord:
    return await storage.create_thread(ThreadRecord(agent_id="agent", **fields))  # type: ignore[arg-type]


def msg(thread_id: str, content: str = "hi", **fields: object) -> Message:
    fields.setdefault("role", "user")
    return Message(thread_id=thread_id, content=content, **fields)  # type: ignore[arg-type]


def ev(thread_id: str, seq: int, type: str = "step", data: object = None) -> Event:
    return Event(thread_id=thread_id, seq=seq, type=type, data=data, at=float(seq))


async def contents(storage: Storage, thread_id: str) -> list[str | None]:
    page = await storage.get_messages(thread_id, include_silent=True)
    return [m.content for m in page.messages]
