"""The current server time: the seed's example of a tool without arguments."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from orchestrator import ToolResult, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState


async def execute(state: ThreadState) -> ToolResult:
    return ToolResult(status="success", result=datetime.now(UTC).isoformat())


tool = define_tool(description="Get the current server time in ISO 8601 format (UTC)", execute=execute)
