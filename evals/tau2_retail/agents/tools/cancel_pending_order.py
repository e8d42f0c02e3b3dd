"""Cancel a pending order (tau2-bench retail): only pending orders, for one of the two reasons."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

from ._retail import order

if TYPE_CHECKING:
    from orchestrator import ThreadState


class Args(BaseModel):
    order_id: str = Field(description="The order id, such as '#W0000000'. Mind the '#' at the beginning.")
    reason: Literal["no longer needed", "ordered by mistake"] = Field(description="Why the order is cancelled.")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    found = await order(state, args.order_id)
    if found is None:
        return ToolResult(status="error", error="Order not found")
    if found["status"] != "pending":
        return ToolResult(status="error", error="Non-pending order cannot be cancelled")
    await state.set_value(f"retail:order_status:{args.order_id}", "cancelled")
    await state.set_value(f"retail:cancel_reason:{args.order_id}", args.reason)
    return ToolResult(status="success", result=json.dumps({**found, "status": "cancelled"}))


tool = define_tool(
    description="Cancel a pending order. If the order is already processed or delivered, it cannot be cancelled. "
    "The agent needs to explain the cancellation detail and ask for explicit user confirmation (yes/no) to proceed.",
    args=Args,
    execute=execute,
)
