"""Versioned schema migrations, shared by the SQLite and PostgreSQL backends.

Each backend's migrations are numbered `.sql` files in `migrations/`, named
`<backend>_<NNNN>_<what>.sql` and applied in order; the database records the
highest version applied. Tests (and future code) may pass their own list, so a
migration is a plain value rather than something discovered at import time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.storage.base import SchemaVersionError

Backend = Literal["sqlite", "postgres"]

_DIR = Path(__file__).with_name("migrations")
_NAME = re.compile(r"^(?P<backend>sqlite|postgres)_(?P<version>\d{4})_(?P<what>[a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(backend: Backend) -> list[Migration]:
    """The backend's migrations in order; numbering gaps are a packaging bug."""
    found: list[Migration] = []
    for path in sorted(_DIR.glob(f"{backend}_*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise ValueError(f"migration file {path}: expected a name like {backend}_0001_what.sql")
        found.append(Migration(int(match["version"]), match["what"], path.read_text(encoding="utf-8")))
    check_sequence(found)
    return found


def check_sequence(migrations: list[Migration]) -> None:
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise ValueError(
                f"migration {migration.name!r} has version {migration.version}; expected {expected} "
                "(versions must run 1, 2, 3 ... without gaps)"
            )


def pending(migrations: list[Migration], current: int, where: str) -> list[Migration]:
    """Migrations newer than `current`; refuses a database newer than the code."""
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise SchemaVersionError(
            f"database {where} has schema version {current}, but this version of orchestrator "
            f"supports schema versions up to {latest}; upgrade orchestrator to open it"
        )
    return [m for m in migrations if m.version > current]


def split_statements(script: str) -> list[str]:
    """Split an SQLite script into single statements (sqlite3 runs one at a time).

    `sqlite3.complete_statement` knows about string literals and trigger bodies,
    so a `;` inside either does not end a statement.
    """
    import sqlite3

    statements: list[str] = []
    buffer = ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            text = _strip_comments(buffer).strip()
            if text.strip(";").strip():
                statements.append(buffer.strip())
            buffer = ""
    if _strip_comments(buffer).strip(" \n\t;"):
        raise ValueError(f"migration script ends with an incomplete statement: {buffer.strip()[:80]!r}")
    return statements


def _strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
