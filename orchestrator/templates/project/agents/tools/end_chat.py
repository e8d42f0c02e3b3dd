"""Lets the simulated visitor end the conversation (the dual_ai agent's end_conversation_tool)."""

from orchestrator import ThreadState, ToolResult, define_tool


async def execute(state: ThreadState) -> ToolResult:
    return ToolResult(status="success", result="Goodbye.")


tool = define_tool(description="End the conversation once your question is answered", execute=execute)
