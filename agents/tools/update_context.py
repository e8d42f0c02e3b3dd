"""Store context about the conversation and tell the model about it.

The data goes to the thread's durable store under `context:<type>`, and a
system message is injected so both sides see the update on their next step.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState


class Args(BaseModel):
    context_type: Literal["user_info", "preferences", "history"] = Field(description="Which context to update")
    data_json: str = Field(description="Context data as a JSON string")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    try:
        data = json.loads(args.data_json)
    except json.JSONDecodeError as exc:
        return ToolResult(status="error", error=f"data_json is not valid JSON: {exc.msg} at position {exc.pos}")
    await state.set_value(f"context:{args.context_type}", data)
    await state.inject_message(role="system", content=f"Updated {args.context_type}: {json.dumps(data)}", silent=False)
    return ToolResult(status="success", result=f"Context updated: {args.context_type}")


tool = define_tool(
    description="Update the conversation context (user info, preferences or history) with new data",
    args=Args,
    execute=execute,
)
