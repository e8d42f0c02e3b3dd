"""Leave the conversation: the simulated customer's end_conversation_tool."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState


class Args(BaseModel):
    reason: str = Field(description="Why the conversation is over, e.g. 'order cancelled'")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    return ToolResult(status="success", result=f"Conversation ended: {args.reason}")


tool = define_tool(description="End the conversation once you are done", args=Args, execute=execute)
