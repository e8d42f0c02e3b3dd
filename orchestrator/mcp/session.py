"""One MCP client session, held open by a task of its own.

The MCP SDK is built on anyio: a session's context must be left in the task
that entered it. Executions come and go, so each session lives in a holder task
that enters `mcp.Client`, reports ready, and waits to be told to close. Callers
from any task send requests on the open session.

A stdio server's stderr is read line by line into the structured log (debug,
redacted) and a short tail that errors quote when the server fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO

import structlog

from providers.config import McpServerConfig

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client import Transport
    from mcp.types import CallToolResult, Tool

_log = structlog.get_logger("orchestrator.mcp")

Redact = Callable[[str], str]
_TAIL_LINES = 20


class Progress(Protocol):
    """A progress callback as the SDK calls it (its `ProgressFnT`, whose parameter names it keeps)."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


class McpServerError(Exception):
    """An MCP server could not start, list its tools or answer; the message names it and its stderr tail."""


class McpSession:
    """A live session with one server. `start()` once; `dead` once the transport is gone."""

    def __init__(self, name: str, config: McpServerConfig, redact: Redact) -> None:
        self.name = name
        self._config = config
        self._redact = redact
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._broken = False
        self.stderr_tail: deque[str] = deque(maxlen=_TAIL_LINES)

    @property
    def dead(self) -> bool:
        return self._broken or self._holder is None or self._holder.done()

    def mark_broken(self) -> None:
        """The transport failed under a call: the next call starts a new session."""
        self._broken = True

    async def start(self) -> None:
        self._holder = asyncio.create_task(self._hold(), name=f"mcp:{self.name}")
        waiter = asyncio.create_task(self._ready.wait())
        try:
            done, _ = await asyncio.wait(
                {waiter, self._holder}, timeout=self._config.startup_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:  # the caller was cancelled: nothing else knows of this session to close it
            self._holder.cancel()  # its transport's exit stops the server
            with contextlib.suppress(BaseException):
                await self._holder
            raise
        finally:
            waiter.cancel()
        if self._client is not None and not self._holder.done():
            return
        if not done:
            await self.close()
            raise self.error(f"did not start within {self._config.startup_timeout:g} s")
        await self._drain_stderr()
        cause = self._failure
        raise self.error(f"could not start: {_describe(cause)}") from None

    async def list_tools(self) -> list[Tool]:
        client = self._require()
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call(self, tool: str, arguments: dict[str, object], progress: Progress | None) -> CallToolResult:
        return await self._require().call_tool(tool, arguments, progress_callback=progress)

    async def close(self) -> None:
        self._closing.set()
        if self._holder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._holder), timeout=5)
            if not self._holder.done():
                self._holder.cancel()
                with contextlib.suppress(BaseException):
                    await self._holder
        await self._drain_stderr()

    def error(self, what: str) -> McpServerError:
        tail = "\n".join(self.stderr_tail)
        text = f"MCP server {self.name!r} {what}"
        if tail:
            text += f"; its stderr ended with:\n{tail}"
        return McpServerError(self._redact(text))

    # -- the holder task -----------------------------------------------------
    async def _hold(self) -> None:
        from mcp import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                target = self._target(stack)
                client = await stack.enter_async_context(Client(target, raise_exceptions=False))
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except BaseException as exc:  # the transport's failures end up here; start() and calls report them
            self._failure = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None

    def _target(self, stack: contextlib.AsyncExitStack) -> Transport:
        config = self._config
        if config.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers=config.resolved_headers(self.name), timeout=httpx2.Timeout(30, read=300))
            return streamable_http_client(config.url, http_client=http)
        from mcp import StdioServerParameters

        assert config.command is not None
        errlog = self._stderr_pipe(stack)
        params = StdioServerParameters(
            command=config.command, args=config.args, env=config.resolved_env(self.name), cwd=config.cwd
        )
        from mcp.client.stdio import stdio_client

        return stdio_client(params, errlog=errlog)

    def _stderr_pipe(self, stack: contextlib.AsyncExitStack) -> TextIO:
        """A pipe for the server's stderr: lines go to the debug log and the tail."""
        read_fd, write_fd = os.pipe()
        writer = os.fdopen(write_fd, "w")
        stack.callback(writer.close)
        self._stderr_task = asyncio.create_task(self._read_stderr(read_fd))
        return writer

    async def _read_stderr(self, read_fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(read_fd, "rb")
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        try:
            while line := await reader.readline():
                text = self._redact(line.decode("utf-8", "replace").rstrip())
                if text:
                    self.stderr_tail.append(text)
                    _log.debug("mcp server stderr", server=self.name, line=text)
        finally:
            transport.close()

    async def _drain_stderr(self) -> None:
        """Let the stderr reader take in what the server wrote before it went away."""
        if self._stderr_task is not None and not self._stderr_task.done():
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=0.5)

    def _require(self) -> Client:
        if self._client is None or self.dead:
            raise self.error("is not running")
        return self._client

    async def settle(self) -> None:
        """After a failed call: give a dying transport a moment, so `dead` and the stderr tail are current."""
        if self._holder is not None and not self._holder.done():
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._holder), timeout=0.2)
        await self._drain_stderr()


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "the connection closed"
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
