"""The retail database slice (../../db.json) and the thread's changes to it.

The database file is read-only; what a run changes (an order cancelled) is kept in the thread's KV
state as `retail:order_status:<order id>`, so every run starts from the same data and the eval's
`values` checks read the outcome. Semantics follow tau2-bench's retail tools (NOTICE.md).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator import ThreadState

DB_FILE = Path(__file__).resolve().parents[2] / "db.json"


@cache
def database() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DB_FILE.read_text(encoding="utf-8"))
    return data


async def order(state: ThreadState, order_id: str) -> dict[str, Any] | None:
    """The order as this thread sees it (its status after the run's own changes), or None."""
    found = database()["orders"].get(order_id)
    if found is None:
        return None
    status = await state.get_value(f"retail:order_status:{order_id}")
    return {**found, "status": status or found["status"]}
