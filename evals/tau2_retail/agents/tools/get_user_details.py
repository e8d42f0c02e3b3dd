"""The details of a user, including their orders (tau2-bench retail)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

from ._retail import database

if TYPE_CHECKING:
    from orchestrator import ThreadState


class Args(BaseModel):
    user_id: str = Field(description="The user id, such as 'sara_doe_496'.")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    user = database()["users"].get(args.user_id)
    if user is None:
        return ToolResult(status="error", error="User not found")
    return ToolResult(status="success", result=json.dumps(user))


tool = define_tool(description="Get the details of a user, including their orders.", args=Args, execute=execute)
