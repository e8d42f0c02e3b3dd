"""An example tool: `city` is its progress argument, so `tool_call_started` fires as soon as the city has streamed."""

from pydantic import BaseModel, Field

from orchestrator import ThreadState, ToolResult, define_tool


class Args(BaseModel):
    city: str = Field(description="The city, e.g. Oslo")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    await state.set_value("last_city", args.city)
    return ToolResult(status="success", result=f"{args.city}: 21 C and sunny")


tool = define_tool(description="Current weather for a city", args=Args, execute=execute, progress_argument="city")
