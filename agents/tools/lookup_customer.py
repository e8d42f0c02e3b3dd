"""Look up a customer by ID or email in a SQLite database.

The database file is `CUSTOMER_DB_PATH` if set, else
`~/.cache/orchestrator/demo_customers.sqlite`; on first use the example
creates it with a few demo customers, so it runs with no setup. The path is
operator-only (`scope="operator"`): a thread or a person over HTTP cannot
choose where files are created. The stdlib's
sqlite3 on a worker thread (`asyncio.to_thread`) keeps the event loop free
without another dependency.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from orchestrator import ToolResult, VariableDefinition, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState

DEFAULT_DB_PATH = Path.home() / ".cache" / "orchestrator" / "demo_customers.sqlite"

_DEMO_CUSTOMERS = [
    ("C001", "Ana Ferreira", "ana@example.com", "gold"),
    ("C002", "Kwame Mensah", "kwame@example.com", "standard"),
    ("C003", "Lena Vogel", "lena@example.com", "standard"),
]


class Args(BaseModel):
    customer_id: str | None = Field(default=None, description="Customer ID, e.g. C001")
    email: str | None = Field(default=None, description="Customer email", json_schema_extra={"format": "email"})


async def execute(state: ThreadState, args: Args) -> ToolResult:
    if not args.customer_id and not args.email:
        return ToolResult(status="error", error="Either customer_id or email is required")
    path = await _db_path(state)
    column, value = ("id", args.customer_id) if args.customer_id else ("email", args.email)
    try:
        row = await asyncio.to_thread(_find, path, column, value)
    except sqlite3.Error as exc:
        return ToolResult(status="error", error=f"Customer database error: {exc}")
    if row is None:
        return ToolResult(status="error", error="Customer not found")
    return ToolResult(status="success", result=json.dumps(row))


def _find(path: Path, column: str, value: str | None) -> dict[str, Any] | None:
    db = sqlite3.connect(path)
    try:
        _ensure_schema(db)
        db.row_factory = sqlite3.Row
        query = f"SELECT id, name, email, tier FROM customers WHERE {column} = ? COLLATE NOCASE"
        row = db.execute(query, (value,)).fetchone()
        return None if row is None else dict(row)
    finally:
        db.close()


async def _db_path(state: ThreadState) -> Path:
    try:
        configured = await state.env("CUSTOMER_DB_PATH")
    except Exception:  # unset everywhere: use the default file
        configured = None
    path = Path(configured).expanduser() if configured else DEFAULT_DB_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _ensure_schema(db: sqlite3.Connection) -> None:
    with db:  # one transaction, committed
        db.execute(
            "CREATE TABLE IF NOT EXISTS customers (id TEXT PRIMARY KEY, name TEXT NOT NULL,"
            " email TEXT NOT NULL UNIQUE, tier TEXT NOT NULL)"
        )
        db.executemany("INSERT OR IGNORE INTO customers VALUES (?, ?, ?, ?)", _DEMO_CUSTOMERS)


tool = define_tool(
    description="Look up customer information (name, email, tier) by customer ID or email",
    args=Args,
    execute=execute,
    variables=(
        VariableDefinition(
            name="CUSTOMER_DB_PATH",
            type="text",
            required=False,
            scope="operator",
            description="SQLite file of customers",
        ),
    ),
)
