"""Durable thread state. `open_storage(url)` picks the backend from a URL."""

from __future__ import annotations

from orchestrator.storage.base import (
    DuplicateEventError,
    ExecutionStart,
    Lease,
    NotFoundError,
    SchemaVersionError,
    StaleLeaseError,
    StepWrite,
    Storage,
    StorageError,
    ThreadBusyError,
)

__all__ = [
    "DuplicateEventError",
    "ExecutionStart",
    "Lease",
    "NotFoundError",
    "SchemaVersionError",
    "StaleLeaseError",
    "StepWrite",
    "Storage",
    "StorageError",
    "ThreadBusyError",
    "open_storage",
]


def open_storage(url: str) -> Storage:
    """`sqlite:///path.db`, `sqlite://:memory:` or a bare path mean SQLite;
    `postgresql://...` means PostgreSQL (the postgres extra: without asyncpg this raises
    `orchestrator.core.extras.MissingExtra` naming it). The returned storage is not yet open."""
    if url.startswith(("postgresql://", "postgres://")):
        from orchestrator.storage.postgres import PostgresStorage

        return PostgresStorage(url)
    from orchestrator.storage.sqlite import SQLiteStorage

    path = url.removeprefix("sqlite:///").removeprefix("sqlite://")
    return SQLiteStorage(path or ":memory:")
