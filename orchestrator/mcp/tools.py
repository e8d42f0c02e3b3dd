"""Tools from MCP servers, offered and run like local tools.

A prompt names `mcp:SERVER` (every tool the server's config allows) or
`mcp:SERVER/TOOL` (one) among its tools. Each MCP tool becomes a
`ToolDefinition`, so dispatch treats it like any local tool: its schema is offered
in the provider's dialect by the pass local tools go through (`definitions/dialect.py`),
its arguments are checked (against the server's JSON schema) before the call, its timeout and the
abort signal cancel it (the SDK tells the server), and whatever goes wrong is an
error result the model can read, never a failed execution.

Servers start on first use: listing tools when a prompt that names them first
runs, or on a call. A session whose server died is started again on the next
call. Sessions close with the runtime.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, model_validator

from orchestrator.core.results import ToolAttachment, ToolResult
from orchestrator.definitions.define import DefinitionError, ToolDefinition
from orchestrator.definitions.dialect import JsonSchema, drop_null_optionals, function_spec
from orchestrator.mcp.session import McpServerError, McpSession, Redact
from providers.config import McpServerConfig

if TYPE_CHECKING:
    from mcp.types import BlobResourceContents, CallToolResult, TextResourceContents, Tool

    from orchestrator.engine.state import ThreadState

PREFIX = "mcp:"
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class McpReferenceError(DefinitionError):
    """A prompt names an MCP server or tool the config does not have or allow."""


@dataclass(frozen=True, slots=True)
class McpTool:
    server: str
    name: str  # the server's own name for the tool
    exposed: str  # the name the model sees: the server's prefix, then `name`
    description: str
    schema: JsonSchema  # as the server listed it: what a call's arguments are checked against
    definition: ToolDefinition

    def spec(self, dialect: str) -> JsonSchema:
        """The OpenAI-format tool dict LiteLLM takes, the parameters in `dialect`'s form.

        The same pass as a local tool's (`dialect.function_spec`), `loose`: what Gemini cannot say
        is widened rather than refused, since the schema is the server's, not the user's.
        """
        return function_spec(self.exposed, self.description, self.schema, dialect, loose=True)


def is_reference(name: str) -> bool:
    return name.startswith(PREFIX)


class McpTools:
    """The MCP servers of one runtime: their sessions, tool listings and calls."""

    def __init__(
        self, servers: Mapping[str, McpServerConfig], redact: Redact, add_secret: Callable[[str], None] | None = None
    ) -> None:
        """`redact` cleans what a server says (stderr, errors, progress); `add_secret` registers the
        credentials its config hands it (`SecretScopes.add`, process-wide), now and at each start."""
        self._servers = dict(servers)
        self._redact = redact
        self._add_secret = add_secret
        for config in self._servers.values():
            self._register(config)
        self._sessions: dict[tuple[str, str | None], McpSession] = {}
        self._starting: dict[tuple[str, str | None], asyncio.Lock] = {}
        self._listed: dict[str, list[McpTool]] = {}

    # -- references ----------------------------------------------------------
    def reference_problem(self, ref: str) -> str | None:
        """What is wrong with `ref` that the config alone shows (no server is started)."""
        server, _, _tool = ref.removeprefix(PREFIX).partition("/")
        if server not in self._servers:
            known = ", ".join(sorted(self._servers)) or "none"
            return f"{ref!r} names MCP server {server!r}, which is not under mcp_servers in the config (known: {known})"
        return None

    async def prepare(self, refs: Iterable[str]) -> None:
        """List the tools of every server `refs` name, once per runtime."""
        for ref in refs:
            if is_reference(ref):
                problem = self.reference_problem(ref)
                if problem:
                    raise McpReferenceError(problem)
                await self.listing(ref.removeprefix(PREFIX).partition("/")[0])

    def resolve(self, ref: str) -> list[McpTool]:
        """The tools `ref` stands for; `prepare` must have listed its server."""
        server, _, tool = ref.removeprefix(PREFIX).partition("/")
        tools = self._listed[server]
        if not tool:
            return tools
        for candidate in tools:
            if candidate.name == tool:
                return [candidate]
        raise McpReferenceError(
            f"{ref!r}: MCP server {server!r} offers no allowed tool {tool!r} "
            f"(allowed: {', '.join(t.name for t in tools) or 'none'})"
        )

    async def exposed_as(self, name: str) -> McpTool | None:
        """The tool the model calls `name`, from the servers whose prefix it carries (listed on first use)."""
        for server, config in self._servers.items():
            if name.startswith(config.prefix):
                for tool in await self.listing(server):
                    if tool.exposed == name:
                        return tool
        return None

    async def listing(self, server: str) -> list[McpTool]:
        """The server's allowed tools (starting it if needed); a failure names the server and its stderr."""
        if server not in self._listed:
            session = await self._session(server, None)
            try:
                raw = await session.list_tools()
            except Exception as exc:
                await session.settle()
                raise session.error(f"could not list its tools: {type(exc).__name__}: {exc}") from None
            self._listed[server] = self._tools(server, raw)
        return self._listed[server]

    def _tools(self, server: str, raw: list[Tool]) -> list[McpTool]:
        config = self._servers[server]
        names = {t.name for t in raw}
        unknown = [n for n in [*(config.include or []), *config.progress_arguments] if n not in names]
        if unknown:
            raise McpServerError(
                f"MCP server {server!r}: the config names tools it does not offer: {', '.join(unknown)} "
                f"(it offers: {', '.join(sorted(names))})"
            )
        allowed = [
            t for t in raw if (config.include is None or t.name in config.include) and t.name not in config.exclude
        ]
        return [self._tool(server, config, t) for t in allowed]

    def _tool(self, server: str, config: McpServerConfig, raw: Tool) -> McpTool:
        exposed = config.prefix + raw.name
        if not _TOOL_NAME.match(exposed):
            raise McpServerError(
                f"MCP server {server!r}: tool name {exposed!r} is not one a model accepts "
                "(1-64 letters, digits, '_' or '-'); leave it out with `exclude` or pick another prefix"
            )
        schema = dict(raw.input_schema or {"type": "object", "properties": {}})
        schema.setdefault("properties", {})
        progress = config.progress_arguments.get(raw.name)
        if progress is not None and (schema["properties"].get(progress) or {}).get("type") != "string":
            raise McpServerError(
                f"MCP server {server!r}: progress_arguments names {progress!r} for tool {raw.name!r}, "
                "which is not a top-level string argument of that tool"
            )
        holder: list[McpTool] = []

        async def execute(state: ThreadState, args: BaseModel) -> ToolResult:
            return await self._call(holder[0], state, dict(args.model_extra or {}))

        definition = ToolDefinition(
            name=exposed,
            description=raw.description or raw.name,
            execute=execute,
            args=_arguments_model(exposed, schema),
            progress_argument=progress,
            timeout=config.timeout,
            annotations={"mcp_server": server, "mcp_tool": raw.name},
            needs_approval=config.approval_needed(raw.name),
            approval_timeout=config.approval_timeout,
        )
        tool = McpTool(server, raw.name, exposed, raw.description or raw.name, schema, definition)
        holder.append(tool)
        return tool

    # -- calls ---------------------------------------------------------------
    async def _call(self, tool: McpTool, state: ThreadState, arguments: dict[str, Any]) -> ToolResult:
        scope = state.thread_id if self._servers[tool.server].scope == "thread" else None
        try:
            session = await self._session(tool.server, scope)
        except McpServerError as exc:
            return ToolResult.fail(str(exc))
        call_id = state.tool_call_id

        async def report(progress: float, total: float | None, message: str | None) -> None:
            state.emit(
                "tool_progress",
                {
                    "tool_call_id": call_id,
                    "name": tool.exposed,
                    "progress": progress,
                    "total": total,
                    "message": self._redact(message) if message else None,
                },
            )

        try:
            result = await session.call(tool.name, arguments, report)
        except Exception as exc:  # the transport failed: the next call starts the server again
            session.mark_broken()
            await session.settle()
            return ToolResult.fail(str(session.error(f"failed during {tool.name!r}: {type(exc).__name__}: {exc}")))
        return _tool_result(tool, result)

    async def _session(self, server: str, scope: str | None) -> McpSession:
        key = (server, scope)
        lock = self._starting.setdefault(key, asyncio.Lock())
        async with lock:
            session = self._sessions.get(key)
            if session is not None and not session.dead:
                return session
            if session is not None:
                await session.close()
            self._sessions[key] = session = await self._start(server)
            return session

    async def _start(self, server: str) -> McpSession:
        """Start a session; a server that fails to start gets one more try."""
        self._register(self._servers[server])  # the environment may have changed since the runtime opened
        for attempt in (1, 2):
            session = McpSession(server, self._servers[server], self._redact)
            try:
                await session.start()
                return session
            except McpServerError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _register(self, config: McpServerConfig) -> None:
        if self._add_secret is not None:
            for value in config.secret_values():
                self._add_secret(value)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)


# -- arguments and results -------------------------------------------------------


def _arguments_model(tool: str, schema: dict[str, Any]) -> type[BaseModel]:
    """A model that checks a call's arguments against the server's schema and keeps them as sent."""
    from jsonschema import validators

    validator = validators.validator_for(schema)(schema)

    class McpArguments(BaseModel):
        model_config = ConfigDict(extra="allow")

        @model_validator(mode="before")
        @classmethod
        def _valid(cls, data: Any) -> Any:
            data = drop_null_optionals(schema, data)  # the openai dialect made the optional ones nullable
            problems = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
            if problems:
                raise ValueError("; ".join(f"{_json_path(p.absolute_path)}: {p.message}" for p in problems[:5]))
            return data

    McpArguments.__name__ = f"{tool}_arguments"
    return McpArguments


def _json_path(path: Iterable[Any]) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _tool_result(tool: McpTool, result: CallToolResult) -> ToolResult:
    texts: list[str] = []
    files: list[ToolAttachment] = []
    for i, block in enumerate(result.content):
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "image" or block.type == "audio":
            ext = block.mime_type.rpartition("/")[2] or "bin"
            files.append(ToolAttachment(name=f"{tool.name}_{i}.{ext}", mime_type=block.mime_type, data=block.data))
        elif block.type == "resource":
            _resource(block.resource, texts, files)
        elif block.type == "resource_link":
            texts.append(f"[resource {block.name}: {block.uri}]")
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(texts)
    if result.is_error:
        return ToolResult.fail(text or f"MCP tool {tool.name!r} failed without a message")
    return ToolResult(status="success", result=text, attachments=list(files) or None)


def _resource(
    resource: BlobResourceContents | TextResourceContents, texts: list[str], files: list[ToolAttachment]
) -> None:
    from mcp.types import TextResourceContents  # the mcp extra is installed once a server answered

    uri = str(resource.uri)
    if isinstance(resource, TextResourceContents):
        texts.append(f"[resource {uri}]\n{resource.text}")
        return
    name = PurePosixPath(uri.split("?")[0]).name or "resource"
    files.append(
        ToolAttachment(name=name, mime_type=resource.mime_type or "application/octet-stream", data=resource.blob)
    )
