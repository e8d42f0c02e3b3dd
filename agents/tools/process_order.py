"""Confirm, cancel or ship an order, then queue a notification to its customer.

`queue_tool` runs `send_notification` after this tool finishes; the runtime
refuses names a tool did not declare in `uses`, so it is declared below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

from .lookup_order import DEMO_ORDERS

if TYPE_CHECKING:
    from orchestrator import ThreadState

_PAST = {"confirm": "confirmed", "cancel": "cancelled", "ship": "shipped"}


class Args(BaseModel):
    order_id: str = Field(description="Order ID, e.g. A1001")
    action: Literal["confirm", "cancel", "ship"] = Field(description="What to do with the order")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    order_id = args.order_id.strip().upper()
    order = DEMO_ORDERS.get(order_id)
    if order is None:
        return ToolResult(status="error", error=f"Order {args.order_id} not found")
    done = _PAST[args.action]
    await state.set_value(f"order_status:{order_id}", done)
    state.queue_tool(
        "send_notification",
        {"customer_id": order["customer_id"], "message": f"Order {order_id} has been {done}"},
    )
    return ToolResult(status="success", result=f"Order {order_id} {done} successfully")


tool = define_tool(
    description="Confirm, cancel or ship an order. The customer is notified automatically.",
    args=Args,
    execute=execute,
    uses=("send_notification",),
    progress_argument="order_id",
)
