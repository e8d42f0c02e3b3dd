"""Look up an order by its ID in the demo order book.

The orders live in memory so the example runs anywhere; a real tool would ask
the order service. `order_id` is the progress argument: hooks and the UI see
which order is being fetched as soon as the model has streamed it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState

DEMO_ORDERS: dict[str, dict[str, object]] = {
    "A1001": {"customer_id": "C001", "status": "shipped", "items": ["Blue kettle"], "total": 39.90},
    "A1002": {"customer_id": "C002", "status": "processing", "items": ["Desk lamp", "Bulb x2"], "total": 54.50},
    "A1003": {"customer_id": "C001", "status": "delivered", "items": ["Tea sampler"], "total": 18.00},
}


class Args(BaseModel):
    order_id: str = Field(description="Order ID, e.g. A1001")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    order = DEMO_ORDERS.get(args.order_id.strip().upper())
    if order is None:
        known = ", ".join(sorted(DEMO_ORDERS))
        return ToolResult(status="error", error=f"Order {args.order_id} not found (known orders: {known})")
    return ToolResult(status="success", result=json.dumps({"order_id": args.order_id.upper(), **order}))


tool = define_tool(
    description="Look up an order by ID. Returns its status, items, total and customer ID as JSON.",
    args=Args,
    execute=execute,
    progress_argument="order_id",
)
