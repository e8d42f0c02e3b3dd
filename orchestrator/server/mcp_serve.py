"""`orchestrator mcp-serve`: every `expose_as_tool` agent as a tool of an MCP server, on the MCP SDK's
lowlevel `Server` (stdio or Streamable HTTP, mcp_cli.py picks).

An MCP client (Claude Desktop, an IDE, LangGraph, another runtime) calls one of our agents as it calls any
tool: each call is a new thread of that agent, created with the call's arguments (checked by the agent's
args model, whose JSON schema is the tool's input schema) and run to its end; the result is the
execution's final answer. The lowlevel server rather than `MCPServer` because the tools are only known at
start (from the definitions folder) and their schemas come from our dialect module, not from signatures.

While the call runs, `tool_call_started` and `tool_progress` events of the thread go back as MCP progress
notifications (when the client asked for them with a progress token). An MCP cancel (`notifications/
cancelled`, or the client going away) stops the execution as `thread.stop` does, and the call returns only
once it has ended, so the thread's history is what a stopped execution leaves: valid and resumable.

Bad calls (an unknown tool, arguments the args model refuses, arguments over `max_input_bytes`) answer an
MCP tool error (`isError: true`) naming what was wrong; they never end the server. Imported only when the
`mcp` extra is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server import Server, ServerRequestContext
from starlette.applications import Starlette

from orchestrator.core.execution_result import ExecutionFailed, ExecutionResult
from orchestrator.definitions.define import AgentDefinition
from orchestrator.definitions.schema import tool_parameters
from orchestrator.engine.nested import opening_text
from orchestrator.runtime import Runtime, Thread

__all__ = ["MAX_INPUT_BYTES", "AgentTools", "mcp_server"]

_log = structlog.get_logger("orchestrator.server")
MAX_INPUT_BYTES = 100_000  # a call's arguments as JSON; a larger one is refused before a thread is made
SCHEMA_DIALECT = "anthropic"  # plain JSON Schema with its refs inlined: what MCP clients read best
STOP_REASON = "MCP client cancelled the call"


class AgentTools:
    """The exposed agents of one runtime as MCP tools: listing and calling them."""

    def __init__(self, runtime: Runtime, *, user_id: str | None = None, max_input_bytes: int = MAX_INPUT_BYTES) -> None:
        self.runtime = runtime
        self.user_id = user_id  # the owner of the threads the calls create (None: no user)
        self.max_input_bytes = max_input_bytes
        self.agents: dict[str, AgentDefinition] = {
            name: agent for name, agent in runtime.definitions.agents.items() if agent.expose_as_tool
        }

    def tools(self) -> list[types.Tool]:
        return [
            types.Tool(
                name=name,
                title=agent.title,
                description=agent.tool_description or "",
                input_schema=tool_parameters(agent.args, SCHEMA_DIALECT),
            )
            for name, agent in self.agents.items()
        ]

    async def call(
        self, name: str, arguments: dict[str, Any] | None, ctx: ServerRequestContext[Any] | None = None
    ) -> types.CallToolResult:
        """Run `name` on `arguments` in a new thread; a refused call or a failed execution is a tool error."""
        agent = self.agents.get(name)
        if agent is None:
            known = ", ".join(sorted(self.agents)) or "none"
            return _error(f"no exposed agent named {name[:80]!r} (tools: {known})")
        args = arguments or {}
        size = len(json.dumps(args, ensure_ascii=False).encode())
        if size > self.max_input_bytes:
            return _error(f"arguments: {size} bytes of JSON, at most {self.max_input_bytes} are accepted")
        try:
            thread = await self.runtime.create_thread(name, args, self.user_id)
        except (ValueError, TypeError) as exc:  # the args model refused them: its message names the field
            return _error(f"arguments: {exc}")
        text = opening_text(args) if agent.type == "ai_human" else None
        try:
            result = await self._run(thread, text, ctx)
        except ExecutionFailed as exc:
            return _error(f"agent {name!r} failed (thread {thread.id}): {exc}")
        return _answer(thread, result)

    async def _run(self, thread: Thread, text: str | None, ctx: ServerRequestContext[Any] | None) -> ExecutionResult:
        """The execution to its end, its progress forwarded; a cancel of this call stops it and waits for it."""
        after = await self.runtime.storage.last_event_seq(thread.id)
        task = await thread.start(text)
        forward = asyncio.create_task(_forward_progress(thread, after, ctx)) if ctx is not None else None
        try:
            return await asyncio.shield(task)
        except BaseException:  # cancelled by the client (or the server shutting down): stop, then wait it out
            if not task.done():
                thread.stop(STOP_REASON)
                _log.info("mcp_call_cancelled", thread_id=thread.id, agent=thread.record.agent_id)
                with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
                    await task
            raise
        finally:
            if forward is not None:
                forward.cancel()
                with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
                    await forward


async def _forward_progress(thread: Thread, after: int, ctx: ServerRequestContext[Any]) -> None:
    """`tool_call_started` and `tool_progress` as MCP progress notifications, numbered 1, 2, ..."""
    count = 0
    async for event in thread.events(after=after):
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == "tool_call_started":
            shown = f" ({data['progress_value']})" if data.get("progress_value") else ""
            message = f"calling {data.get('name')}{shown}"
        elif event.type == "tool_progress":
            done, total = data.get("progress"), data.get("total")
            message = f"{data.get('name')}: {data.get('message') or done}" + (f" of {total}" if total else "")
        elif event.type in ("execution_stopped", "execution_failed"):
            return
        else:
            continue
        count += 1
        await ctx.session.report_progress(count, None, message)


def _answer(thread: Thread, result: ExecutionResult) -> types.CallToolResult:
    output = result.output
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)
    meta = {"thread_id": thread.id, "stopped_by": result.stopped_by, "reason": result.reason}
    stopped = result.stopped_by == "caller"
    return types.CallToolResult(content=[types.TextContent(text=text or "")], is_error=stopped, meta=meta)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def mcp_server(tools: AgentTools, name: str = "orchestrator") -> Server[Any]:
    """The lowlevel MCP server answering tools/list and tools/call from `tools`."""
    from orchestrator import __version__

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools.tools())

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            return await tools.call(params.name, params.arguments, ctx)
        except Exception as exc:  # a bug or a storage failure: a tool error, the server goes on
            _log.exception("mcp_call_failed", tool=params.name)
            return _error(f"internal error running {params.name[:80]!r}: {type(exc).__name__}")

    return Server(name, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(tools: AgentTools) -> None:
    """Serve one client on this process's stdin and stdout until it closes them."""
    from mcp.server.stdio import stdio_server

    server = mcp_server(tools)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(tools: AgentTools, host: str, path: str = "/mcp") -> Starlette:
    """The Streamable HTTP endpoint at `path`, the SDK's DNS-rebinding guard on for a loopback `host`."""
    return mcp_server(tools).streamable_http_app(streamable_http_path=path, host=host)
