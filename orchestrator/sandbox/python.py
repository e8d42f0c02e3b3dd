"""Python in Monty, a sandboxed interpreter maintained by Pydantic (the ``pydantic-monty`` package).

Why this engine (docs/security.md has the comparison with CPython on WASI and
with our earlier fork server): Monty interprets a subset of Python in Rust; the
guest has no system call, no frame or object introspection, no ``ctypes`` and
no module that reaches files, processes or the network (``open`` finds nothing
and ``os`` has no environment), so isolation is by construction, and keeping it
so is Monty's maintainers' full-time job.

How a run goes:

- the source is checked and rewritten on the host (`_python_source`): the import
  allowlist, the module map, the value of the last expression;
- every run gets a fresh worker process (``max_checkouts_per_worker=1``) from a pool
  kept warm per event loop, started with no environment, inside the bubblewrap
  jail of `_jail` unless ``runtime.sandbox.python_jail`` is ``none``: nothing of a
  run survives into another, and the pool never reuses a process a guest ran in;
- Monty bounds the heap (the 128 MiB ceiling), the run's time and its recursion;
  the host bounds the wall clock (a stopped or late run is cancelled, and its
  worker killed) and the console it keeps;
- the answer is encoded as JSON inside the guest, so at most `RESULT_LIMIT`
  characters come back; what Monty raises becomes the run's result, never a host
  exception (only a jail that cannot start raises `SandboxUnavailable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.core.extras import MissingExtra, require
from orchestrator.sandbox import (
    MEMORY_CEILING,
    RESULT_LIMIT,
    CodeResult,
    SandboxUnavailable,
    _AbortFlag,
    _Console,
    _jail,
    _Request,
)
from orchestrator.sandbox._budget import Lease
from orchestrator.sandbox._python_source import Program, SourceError, prepare

if TYPE_CHECKING:
    import pydantic_monty

_GRACE = 1.0  # seconds past the deadline before the host cancels a run the engine has not ended
_WARM_WORKERS = 2  # workers started ahead of the runs that will use them
_TIME_LIMITS = ("feed time limit exceeded", "sleep limit exceeded")  # Monty's own TimeoutErrors


@functools.cache
def engine_version() -> str:
    from importlib.metadata import version

    return f"Monty {version('pydantic-monty-runtime')} (pydantic-monty)"


class _Pools:
    """One worker pool per event loop (the pool's I/O belongs to the loop that entered it)."""

    def __init__(self) -> None:
        self._pools: dict[asyncio.AbstractEventLoop, pydantic_monty.AsyncMonty] = {}
        self._starting: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    async def get(self, jail: Literal["bwrap", "none"], workers: int) -> pydantic_monty.AsyncMonty:
        loop = asyncio.get_running_loop()
        for other in [known for known in self._pools if known.is_closed()]:
            self._pools.pop(other)  # its workers die with their pipes
            self._starting.pop(other, None)
        if loop in self._pools:
            return self._pools[loop]
        async with self._starting.setdefault(loop, asyncio.Lock()):
            if loop not in self._pools:
                self._pools[loop] = await _open_pool(jail, workers)
        return self._pools[loop]

    async def close(self) -> None:
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.__aexit__(None, None, None)


_pools = _Pools()


async def _open_pool(jail: Literal["bwrap", "none"], workers: int) -> pydantic_monty.AsyncMonty:
    from pydantic_monty import AsyncMonty

    binary: Path | None = None
    if jail == "bwrap":
        try:
            binary = await asyncio.to_thread(_jail.launcher)  # once per process: ldd and a trial start
        except _jail.JailUnavailable as exc:
            raise SandboxUnavailable(f"{exc}; set runtime.sandbox.python_jail: none to run on Monty alone") from None
    pool = AsyncMonty(
        binary_path=binary,
        min_processes=min(_WARM_WORKERS, workers),
        max_processes=workers,
        max_checkouts_per_worker=1,  # a fresh process for every run
    )
    try:
        await pool.__aenter__()
    except RuntimeError as exc:  # the worker binary would not start
        raise SandboxUnavailable(f"the Python sandbox's workers did not start: {exc}") from None
    return pool


async def shutdown() -> None:
    """Stop this loop's workers (tests and shutdown hooks call it)."""
    await _pools.close()


async def run_python(request: _Request, abort: _AbortFlag, lease: Lease) -> CodeResult:
    """One run, within `request.timeout`; the lease goes back when its worker is gone."""
    try:
        require("pydantic_monty", feature="run_code in python", extra="sandbox")
        program = prepare(
            request.source,
            entry=request.entry,
            modules=request.modules,
            imports=request.imports,
            fn=request.fn,
            result_limit=RESULT_LIMIT,
        )
    except MissingExtra as exc:
        lease.release()
        return CodeResult(status="error", error=str(exc))
    except SourceError as exc:
        lease.release()
        return CodeResult(status="error", error=str(exc), stack=exc.stack)
    try:
        return await _run_bounded(program, request, abort)
    finally:
        lease.release()


async def _run_bounded(program: Program, request: _Request, abort: _AbortFlag) -> CodeResult:
    from orchestrator.sandbox import current_settings

    if abort.is_set():
        return CodeResult(status="aborted", error=abort.reason)
    settings = current_settings()
    pool = await _pools.get(settings.python_jail, settings.max_python_runs)
    loop = asyncio.get_running_loop()
    console = _Console()
    task = loop.create_task(_run(pool, program, request, console))
    abort.on_set(lambda: _soon(loop, task.cancel))
    try:
        done, _ = await asyncio.wait({task}, timeout=request.timeout + _GRACE)
    finally:
        task.cancel()  # a run we stop waiting for (timeout, or our caller cancelled) ends its worker
    if not done:
        result = CodeResult(status="timeout", error=f"timed out after {request.timeout}s")
    elif task.cancelled():
        result = CodeResult(status="aborted", error=abort.reason or "aborted")
    else:
        result = task.result()
    console.fill(result)
    jailed = "a fresh worker process in a bubblewrap jail" if settings.python_jail == "bwrap" else "a fresh worker"
    result.report = {"engine": f"{engine_version()}, {jailed}", "memory_held_bytes": None}
    return result


def _soon(loop: asyncio.AbstractEventLoop, callback: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(callback)


async def _run(pool: pydantic_monty.AsyncMonty, program: Program, request: _Request, console: _Console) -> CodeResult:
    import pydantic_monty

    limits: pydantic_monty.ResourceLimits = {
        "max_memory": MEMORY_CEILING,
        "max_feed_duration_secs": request.timeout,
        "max_total_sleep_secs": request.timeout,
    }
    inputs = {**request.globals, "__sandbox_args": request.args}
    try:
        async with pool.checkout(script_name=request.entry, limits=limits) as session:
            answer: object = None
            for index, snippet in enumerate(program.snippets):
                last = index == len(program.snippets) - 1
                printed = lambda _stream, text: console.add(text)  # noqa: E731  # stdout and stderr together
                answer = await session.feed_run(snippet.code, inputs=inputs if last else None, print_callback=printed)
    except pydantic_monty.MontyError as exc:
        return _failure(exc, program)
    except RuntimeError as exc:  # the pool could not give a worker (it died while starting)
        return CodeResult(status="error", error=f"the Python sandbox failed: {exc}")
    return _answer(answer)


def _answer(answer: object) -> CodeResult:
    if isinstance(answer, int) and not isinstance(answer, bool):
        return CodeResult(
            status="error",
            error=f"the result is {answer} characters of JSON, over the sandbox's limit of {RESULT_LIMIT}",
        )
    if not isinstance(answer, str):
        return CodeResult(status="error", error="the sandboxed code returned no result")
    try:
        return CodeResult(status="ok", value=json.loads(answer))
    except (ValueError, RecursionError):  # the guest replaced its own json.dumps: its answer, but not JSON
        return CodeResult(status="error", error="the sandboxed code returned an invalid result")


def _failure(exc: pydantic_monty.MontyError, program: Program) -> CodeResult:
    """What the engine raised, as the run's result, with a traceback of the guest's own lines."""
    import pydantic_monty

    if isinstance(exc, pydantic_monty.MontyCrashedError):
        if getattr(exc, "timed_out", False):
            return CodeResult(status="timeout", error="timed out (the worker was stopped)")
        return CodeResult(status="error", error=f"the Python sandbox's worker died: {exc}")
    if isinstance(exc, pydantic_monty.MontySyntaxError):
        return CodeResult(status="error", error=f"SyntaxError: {exc}")
    if not isinstance(exc, pydantic_monty.MontyRuntimeError):
        return CodeResult(status="error", error=f"the Python sandbox failed: {type(exc).__name__}: {exc}")
    inner = exc.exception()
    name, message = type(inner).__name__, str(inner)
    if isinstance(inner, MemoryError):
        return CodeResult(status="oom", error=f"MemoryError: out of memory (ceiling {MEMORY_CEILING} bytes)")
    if isinstance(inner, TimeoutError) and message.startswith(_TIME_LIMITS):
        return CodeResult(status="timeout", error="timed out")
    frames = [(frame.filename, frame.line, frame.function_name) for frame in exc.traceback()]
    if frames and _snippet_line(frames[-1]) == (len(program.snippets) - 1, program.encode_line):
        return CodeResult(status="error", error=f"the result is not JSON-serialisable: {message}")
    if isinstance(inner, NotImplementedError):
        message += " (the sandbox runs Monty, a subset of Python: see docs/guide.md, 'Sandboxed code')"
    return CodeResult(status="error", error=f"{name}: {message}", stack=_stack(frames, program, f"{name}: {message}"))


def _snippet_line(frame: tuple[str, int, str | None]) -> tuple[int, int] | None:
    """`<python-input-N>` is the engine's name for the Nth snippet fed to a session."""
    filename, line, _ = frame
    if filename.startswith("<python-input-") and filename.endswith(">"):
        with contextlib.suppress(ValueError):
            return int(filename[len("<python-input-") : -1]), line
    return None


def _stack(frames: list[tuple[str, int, str | None]], program: Program, last: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for frame in frames:
        where = _snippet_line(frame)
        origin = program.origin(*where) if where else None
        if origin is None:
            continue  # a line of the driver or a loader, not the guest's
        filename, line = origin
        function = "<module>" if frame[2] in (None, "__sandbox_load") else frame[2]
        lines.append(f'  File "{filename}", line {line}, in {function}')
        text = program.sources.get(filename, [])
        if 0 < line <= len(text) and text[line - 1].strip():
            lines.append(f"    {text[line - 1].strip()}")
    return "\n".join([*lines, last])
