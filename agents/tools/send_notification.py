"""Notify a customer. The demo records the notification instead of sending it.

Each notification is kept in the thread's durable store (so a later turn, or
a test, can read what was sent) and emitted as a custom thread event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState


class Args(BaseModel):
    customer_id: str = Field(description="Customer ID, e.g. C001")
    message: str = Field(description="The notification text")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    sent = list(await state.get_value("notifications") or [])
    sent.append({"customer_id": args.customer_id, "message": args.message})
    await state.set_value("notifications", sent)
    state.emit("notification", {"customer_id": args.customer_id, "message": args.message})
    return ToolResult(status="success", result=f"Notification sent to {args.customer_id}")


tool = define_tool(description="Send a notification message to a customer", args=Args, execute=execute)
