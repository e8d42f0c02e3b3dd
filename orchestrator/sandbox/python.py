"""Python in an isolated child process, forked from a warm fork server.

Why a fork server: starting an interpreter costs tens of milliseconds; a
fork of a server that has already imported the allowed stdlib costs a few.
Each execution gets a fresh child (nothing survives between runs), isolated
by `_isolation` (namespaces, Landlock, seccomp, rlimits) and killed by the
server at the wall-clock deadline. Servers are pooled per event loop; how
many run at once is the process-wide budget's business (`_budget`).

The fork server starts from an empty environment plus `SERVER_ENV`, so no
host variable (API keys included) exists in it or in any child forked from it.
Whatever a child writes on its result pipe is the guest's outcome: the server
reads at most `RESULT_LIMIT` bytes of it, and this module validates it as a
guest result (anything else is an error result, never a host exception).

A server that misbehaves (dies, or does not answer past the deadline plus a
grace period) is killed and replaced; the execution reports an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import struct
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from . import CONSOLE_LIMIT, MEMORY_CEILING, RESULT_LIMIT, CodeResult, SandboxUnavailable, _AbortFlag, _Request
from ._budget import Lease
from ._frames import DoneHeader, GuestRequest, HostMessage, RunHeader, ServerMessage

SERVER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # the fork server's whole environment
_GRACE = 3.0
_SERVER = Path(__file__).with_name("_child.py")
_ISOLATED, _UNAVAILABLE = b"I", b"U"  # the child's first byte: see _child.py


class _GuestResult(BaseModel):
    """What a guest may report about itself; anything else on the pipe is an invalid result."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "error", "oom"]
    value: Any = None
    error: str | None = None
    stack: str | None = None
    console: str = ""
    console_truncated: bool = False


class _Server:
    """One fork-server process and its framed pipe."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> _Server:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            str(_SERVER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env=dict(SERVER_ENV),
        )
        server = cls(process)
        try:
            hello = await asyncio.wait_for(server.receive(), 30)
        except BaseException:  # cancelled (a stopped tool) or broken before it was ready: nobody else can kill it
            server.kill()
            raise
        if hello.get("op") != "ready":
            server.kill()
            raise SandboxUnavailable(f"the Python fork server did not start: {hello}")
        return server

    def send(self, message: HostMessage, body: bytes | None = None) -> None:
        assert self.process.stdin is not None
        data = json.dumps(message).encode()
        frames = struct.pack(">I", len(data)) + data
        if body is not None:
            frames += struct.pack(">I", len(body)) + body
        self.process.stdin.write(frames)

    async def receive(self) -> ServerMessage:
        message: ServerMessage = json.loads(await self.receive_bytes(64 * 1024))  # our own server's frames
        return message

    async def receive_bytes(self, limit: int) -> bytes:
        """One frame; a frame over `limit` means the server is broken (the caller kills it)."""
        assert self.process.stdout is not None
        header = await self.process.stdout.readexactly(4)
        size = struct.unpack(">I", header)[0]
        if size > limit:
            raise ConnectionError(f"the fork server sent a {size}-byte frame (limit {limit})")
        return await self.process.stdout.readexactly(size)

    def alive(self) -> bool:
        return self.process.returncode is None

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


class _Pool:
    """Idle servers of one event loop; the budget bounds how many are busy at once."""

    def __init__(self) -> None:
        self.idle: list[_Server] = []

    async def acquire(self) -> _Server:
        while self.idle:
            server = self.idle.pop()
            if server.alive():
                return server
        return await _Server.start()

    def release(self, server: _Server, healthy: bool) -> None:
        if healthy and server.alive():
            self.idle.append(server)
        else:
            server.kill()

    def close(self) -> None:
        for server in self.idle:
            server.kill()
        self.idle.clear()


_pools: dict[asyncio.AbstractEventLoop, _Pool] = {}


def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    for other in [known for known in _pools if known.is_closed()]:
        _pools.pop(other).close()
    if loop not in _pools:
        _pools[loop] = _Pool()
    return _pools[loop]


async def shutdown() -> None:
    """Stop this loop's idle fork servers (tests and shutdown hooks call it)."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        for server in pool.idle:
            server.kill()
            with contextlib.suppress(Exception):
                await server.process.wait()
        pool.idle.clear()


async def run_python(request: _Request, abort: _AbortFlag, lease: Lease) -> CodeResult:
    try:
        if abort.is_set():
            return CodeResult(status="aborted", error=abort.reason)
        header, data = await _exchange(request, abort)
    finally:
        lease.release()
    if header is None:
        return CodeResult(status="error", error=f"the Python sandbox failed: {data.decode()}")
    result = _outcome(header, data)
    if result.status == "aborted" and abort.reason:
        result.error = abort.reason
    result.memory_used_bytes = header.get("maxrss")
    result.report = {
        "engine": f"CPython {sys.version.split()[0]} (forked, isolated child)",
        "memory_held_bytes": result.memory_used_bytes,
    }
    return result


async def _exchange(request: _Request, abort: _AbortFlag) -> tuple[DoneHeader | None, bytes]:
    """Send one run to a pooled server; its verdict and the child's raw bytes (or None and why)."""
    pool = _pool()
    server = await pool.acquire()
    healthy = False
    in_flight = [True]
    loop = asyncio.get_running_loop()
    try:
        server.send(_header(request), json.dumps(_body(request)).encode())

        def on_abort() -> None:
            if in_flight[0]:
                _send_abort(loop, server, in_flight)

        abort.on_set(on_abort)
        async with asyncio.timeout(request.timeout + _GRACE):
            header = await server.receive()
            data = await server.receive_bytes(RESULT_LIMIT + 1)
        if header["op"] != "done":  # only a server's first frame says "ready"
            raise ConnectionError(f"the fork server answered a run with {header['op']!r}")
        healthy = True
        return header, data
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
        return None, type(exc).__name__.encode()
    finally:
        in_flight[0] = False
        pool.release(server, healthy)


def _outcome(header: DoneHeader, data: bytes) -> CodeResult:
    """The server's verdict first, then what the child wrote (the guest's word, validated)."""
    verdict = header.get("verdict")
    if verdict == "timeout":
        return CodeResult(status="timeout", error="timed out (killed at the wall-clock deadline)")
    if verdict == "aborted":
        return CodeResult(status="aborted", error="aborted")
    if verdict == "too_large":
        return CodeResult(status="error", error=f"the result is over the sandbox's limit of {RESULT_LIMIT} bytes")
    if data[:1] == _UNAVAILABLE:  # written before any guest code ran: the guest cannot forge it
        raise SandboxUnavailable(f"Python sandbox isolation is missing: {data[1:].decode(errors='replace')}")
    if data[:1] == _ISOLATED and len(data) > 1:
        try:
            guest = _GuestResult.model_validate_json(data[1:])
        except ValidationError:
            return CodeResult(status="error", error="the sandboxed code wrote an invalid result on its result channel")
        if len(guest.console) > CONSOLE_LIMIT:  # a guest writing its own result skips the capture's cap
            guest.console, guest.console_truncated = guest.console[:CONSOLE_LIMIT], True
        return CodeResult(**guest.model_dump())
    return _death(int(header.get("status", 0)))


def _death(status: int) -> CodeResult:
    """The child ended without a result: say how."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return CodeResult(status="timeout", error=f"killed by {signal.Signals(sig).name} (CPU limit)")
        return CodeResult(status="error", error=f"the interpreter died of {signal.Signals(sig).name}")
    return CodeResult(
        status="error",
        error=f"the interpreter exited with status {os.waitstatus_to_exitcode(status)} and wrote no result",
    )


def _send_abort(loop: asyncio.AbstractEventLoop, server: _Server, in_flight: list[bool]) -> None:
    """Ask the server to kill the child, unless the run has already come back."""

    def send() -> None:
        if in_flight[0]:
            server.send({"op": "abort"})

    with contextlib.suppress(RuntimeError):  # the loop is closed
        loop.call_soon_threadsafe(send)


def _header(request: _Request) -> RunHeader:
    """What the fork server reads: limits only, no guest data."""
    return {"op": "run", "timeout": request.timeout, "memory_limit": MEMORY_CEILING, "result_limit": RESULT_LIMIT}


def _body(request: _Request) -> GuestRequest:
    """What only the forked child decodes."""
    return {
        "source": request.source,
        "fn": request.fn,
        "args": request.args,
        "imports": request.imports,
        "globals": request.globals,
        "modules": request.modules,
        "entry": request.entry,
        "console_limit": CONSOLE_LIMIT,
    }
