"""The status and details of an order (tau2-bench retail)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

from ._retail import order

if TYPE_CHECKING:
    from orchestrator import ThreadState


class Args(BaseModel):
    order_id: str = Field(description="The order id, such as '#W0000000'. Mind the '#' at the beginning.")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    found = await order(state, args.order_id)
    if found is None:
        return ToolResult(status="error", error="Order not found")
    return ToolResult(status="success", result=json.dumps(found))


tool = define_tool(description="Get the status and details of an order.", args=Args, execute=execute)
