"""Python in an isolated child process, forked from a warm fork server.

Why a fork server: starting an interpreter costs tens of milliseconds; a
fork of a server that has already imported the allowed stdlib costs a few.
Each execution gets a fresh child (nothing survives between runs), isolated
by `_isolation` (namespaces, Landlock, seccomp, rlimits) and killed by the
server at the wall-clock deadline. Servers are pooled (`POOL_SIZE`), so
executions run concurrently up to that many and queue beyond it.

A server that misbehaves (dies, or does not answer past the deadline plus a
grace period) is killed and replaced; the execution reports an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import sys
from pathlib import Path

from . import CONSOLE_LIMIT, MEMORY_CEILING, CodeResult, SandboxUnavailable, _AbortFlag, _Request

POOL_SIZE = 2
_GRACE = 3.0
_SERVER = Path(__file__).with_name("_child.py")


class _Server:
    """One fork-server process and its framed pipe."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> _Server:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", str(_SERVER),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        server = cls(process)
        hello = await asyncio.wait_for(server.receive(), 30)
        if hello.get("op") != "ready":
            server.kill()
            raise SandboxUnavailable(f"the Python fork server did not start: {hello}")
        return server

    def send(self, message: dict) -> None:
        data = json.dumps(message).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(struct.pack(">I", len(data)) + data)

    async def receive(self) -> dict:
        assert self.process.stdout is not None
        header = await self.process.stdout.readexactly(4)
        body = await self.process.stdout.readexactly(struct.unpack(">I", header)[0])
        return json.loads(body)

    def alive(self) -> bool:
        return self.process.returncode is None

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


class _Pool:
    """Idle servers of one event loop; at most POOL_SIZE exist at once."""

    def __init__(self) -> None:
        self.idle: list[_Server] = []
        self.slots = asyncio.Semaphore(POOL_SIZE)

    async def acquire(self) -> _Server:
        await self.slots.acquire()
        while self.idle:
            server = self.idle.pop()
            if server.alive():
                return server
        try:
            return await _Server.start()
        except BaseException:
            self.slots.release()
            raise

    def release(self, server: _Server, healthy: bool) -> None:
        if healthy and server.alive():
            self.idle.append(server)
        else:
            server.kill()
        self.slots.release()

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


async def run_python(request: _Request, abort: _AbortFlag) -> CodeResult:
    if abort.is_set():
        return CodeResult(status="aborted", error=abort.reason)
    pool = _pool()
    server = await pool.acquire()
    healthy = False
    in_flight = [True]
    loop = asyncio.get_running_loop()
    try:
        server.send(_wire(request))
        abort.on_set(lambda: in_flight[0] and _send_abort(loop, server, in_flight))
        reply = await asyncio.wait_for(server.receive(), request.timeout + _GRACE)
        healthy = True
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
        return CodeResult(status="error", error=f"the Python sandbox failed: {type(exc).__name__}")
    finally:
        in_flight[0] = False
        pool.release(server, healthy)
    if reply.get("status") == "unavailable":
        raise SandboxUnavailable(f"Python sandbox isolation is missing: {reply.get('error')}")
    if reply.get("status") == "aborted" and abort.reason:
        reply["error"] = abort.reason
    reply["report"] = {"engine": f"CPython {sys.version.split()[0]} (forked, isolated child)",
                       "memory_held_bytes": reply.get("memory_used_bytes")}  # fmt: skip
    return CodeResult.model_validate(reply)


def _send_abort(loop: asyncio.AbstractEventLoop, server: _Server, in_flight: list[bool]) -> None:
    """Ask the server to kill the child, unless the run has already come back."""

    def send() -> None:
        if in_flight[0]:
            server.send({"op": "abort"})

    with contextlib.suppress(RuntimeError):  # the loop is closed
        loop.call_soon_threadsafe(send)


def _wire(request: _Request) -> dict:
    return {
        "op": "run",
        "source": request.source,
        "fn": request.fn,
        "args": request.args,
        "imports": request.imports,
        "globals": request.globals,
        "modules": request.modules,
        "entry": request.entry,
        "timeout": request.timeout,
        "memory_limit": MEMORY_CEILING,
        "console_limit": CONSOLE_LIMIT,
    }
