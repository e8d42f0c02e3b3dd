"""An approved tool: it would send mail outside the system, so a person approves each call first.

`needs_approval=True` (or a function of `(state, args)`: `lambda state, args: not args.email.endswith("@x.org")`)
makes the call wait: the execution ends `awaiting_approval` until `thread.approve(call_id)` or
`thread.reject(call_id, reason)`; `orchestrator run` asks `Approve? [y/n or a reason]`.
"""

from pydantic import BaseModel, Field

from orchestrator import ThreadState, ToolResult, define_tool


class Args(BaseModel):
    email: str = Field(description="Where to send the forecast")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    await state.set_value("forecast_sent_to", args.email)  # an example: a real tool would send the mail here
    return ToolResult(status="success", result=f"forecast sent to {args.email}")


tool = define_tool(description="Email the forecast to someone", args=Args, execute=execute, needs_approval=True)
