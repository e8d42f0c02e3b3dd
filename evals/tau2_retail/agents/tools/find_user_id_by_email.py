"""Find a user id by email (tau2-bench retail)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

from ._retail import database

if TYPE_CHECKING:
    from orchestrator import ThreadState


class Args(BaseModel):
    email: str = Field(description="The email of the user, such as 'something@example.com'.")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    for user_id, user in database()["users"].items():
        if user["email"].lower() == args.email.lower():
            return ToolResult(status="success", result=user_id)
    return ToolResult(status="error", error="User not found")


tool = define_tool(description="Find user id by email.", args=Args, execute=execute)
