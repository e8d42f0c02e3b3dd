"""JavaScript and TypeScript in QuickJS-ng on wasmtime (the ``quickjs-rs`` package).

Why this engine: the guest runs inside a WebAssembly instance, so it cannot
reach host memory, files, the network or processes (no WASI directories are
opened and WASI has no sockets); ES modules come only from our loader, which
serves the in-memory module map and refuses everything else.

Three things the library does not give by itself, done here:

- A ceiling that counts everything. QuickJS's own ``memory_limit`` did not
  stop an ArrayBuffer bomb (the instance grew past 1 GiB), so the wasmtime
  store's linear memory is capped at `MEMORY_CEILING` as well; QuickJS's
  limit sits a little under it so most bombs end as a clean JS out-of-memory.
- Deep recursion. The guest's stack check does not fire under WASI; a runaway
  recursion exhausts wasmtime's native stack and traps the instance. We give
  wasm a 16 MiB stack (default 512 KiB: ~800 frames) on a thread with a
  64 MiB stack, and map the trap to a RangeError. A trapped instance is
  discarded, like every instance: each execution gets a fresh one (~3 ms).
- Timeout and abort through one interrupt handler, polled by the
  interpreter, which knows which of the two fired.
- A deadline that holds inside native operations. The interpreter does not
  poll its handler there (an ``indexOf`` of a long needle ran for minutes past
  its timeout, holding its budget share), so the engine uses wasmtime's epoch
  interruption as well (`_epoch.py`): `_EPOCH_MARGIN` past the deadline the
  store traps wherever it is, the thread ends and its lease goes back.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import posixpath
import threading
import time
from typing import Any

from orchestrator.core.extras import MissingExtra, require
from orchestrator.sandbox import MEMORY_CEILING, RESULT_LIMIT, CodeResult, _AbortFlag, _Console, _Request
from orchestrator.sandbox._budget import Lease
from orchestrator.sandbox._epoch import EpochClock

_WASM_STACK = 1920 * 1024  # wasmtime caps it below its async stack size (2 MiB)
_THREAD_STACK = 16 * 1024 * 1024
_QJS_HEADROOM = 8 * 1024 * 1024  # linear memory kept for the guest's stack and data
_GRACE = 2.0  # seconds past the deadline before the host stops waiting for the engine
_EPOCH_MARGIN = 0.05  # seconds past the deadline before the epoch stops what the interrupt handler did not
_engine_lock = threading.Lock()
_clock: EpochClock | None = None
_thread_lock = threading.Lock()

_CONSOLE_PRELUDE = """
(function (write) {
  const fmt = (a) => {
    if (typeof a === "string") return a;
    if (a instanceof Error) return String(a.stack || a);
    try { const s = JSON.stringify(a); return s === undefined ? String(a) : s; }
    catch (e) { return String(a); }
  };
  const make = (level) => (...args) => { write(level, args.map(fmt).join(" ")); };
  globalThis.console = Object.freeze({
    log: make("log"), info: make("info"), warn: make("warn"),
    error: make("error"), debug: make("debug"),
  });
})(globalThis.__sandbox_console);
delete globalThis.__sandbox_console;
"""

_DRIVER = """
await (async () => {
  const mod = await import(%(entry)s);
  const fn = %(fn)s;
  const target = mod[fn];
  let value;
  if (typeof target === "function") value = await target(...JSON.parse(%(args)s));
  else if (fn === "default") value = target;
  else throw new TypeError("module " + %(entry)s + " exports no function '" + fn + "'");
  const text = JSON.stringify(value);
  return text === undefined ? null : text;
})()
"""


@functools.cache
def engine_version() -> str:
    from importlib.metadata import version

    return f"quickjs-ng via quickjs-rs {version('quickjs-rs')} on wasmtime {version('wasmtime')}"


async def run_javascript(request: _Request, abort: _AbortFlag, lease: Lease) -> CodeResult:
    """Run on a dedicated big-stack thread; never blocks the event loop.

    The lease goes back when the thread ends, not when the host stops waiting:
    an engine that ignores its interrupt still holds its memory.
    """
    try:  # the base install has no engine: an error result the model can act on (use Python), no traceback
        require("quickjs_rs", feature=f"run_code in {request.language}", extra="sandbox")
    except MissingExtra as exc:
        lease.release()
        return CodeResult(status="error", error=str(exc))
    loop = asyncio.get_running_loop()
    future: asyncio.Future[CodeResult] = loop.create_future()

    def deliver(result: CodeResult) -> None:
        if not future.done():
            future.set_result(result)

    def body() -> None:
        try:
            result = _execute(request, abort)
        finally:
            lease.release()
        _soon(loop, deliver, result)

    with _thread_lock:  # stack_size is process-wide; set it only for our thread
        previous = threading.stack_size(_THREAD_STACK)
        try:
            threading.Thread(target=body, name="sandbox-js", daemon=True).start()
        except BaseException:
            lease.release()
            raise
        finally:
            threading.stack_size(previous)
    abort.on_set(lambda: _soon(loop, _grace_timer, loop, future, abort))
    try:
        return await asyncio.wait_for(asyncio.shield(future), request.timeout + _GRACE)
    except TimeoutError:  # the engine did not answer its interrupt: give up on it
        return CodeResult(status="timeout", error=f"timed out after {request.timeout}s")
    except asyncio.CancelledError:
        abort.set("cancelled")
        raise


def _soon(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass


def _grace_timer(loop: asyncio.AbstractEventLoop, future: asyncio.Future[CodeResult], abort: _AbortFlag) -> None:
    def expire() -> None:
        if not future.done():
            future.set_result(CodeResult(status="aborted", error=abort.reason))

    loop.call_later(_GRACE, expire)


def _configure_engine() -> EpochClock:
    """Make quickjs-rs's shared engine ours before it makes one: a deeper native stack, epoch interruption.

    Every store on an engine with epoch interruption needs a deadline before
    its first wasm instruction, so the library's one instantiation function
    (imported by name in its two modules) arms the store first.
    """
    global _clock
    import quickjs_rs._engine as qjs_engine
    import quickjs_rs._transform as qjs_transform
    import quickjs_rs._wasmtime as shared
    import wasmtime

    with _engine_lock:
        if _clock is not None:
            return _clock
        if shared._SHARED_ENGINE is not None:
            raise RuntimeError("quickjs-rs made its engine before the sandbox configured it (no epoch interruption)")
        config = wasmtime.Config()
        config.max_wasm_stack = _WASM_STACK
        config.epoch_interruption = True
        engine = wasmtime.Engine(config)
        clock = EpochClock(engine)
        instantiate = shared.instantiate_wasm_artifact

        def armed(artifact: Any, store: wasmtime.Store) -> wasmtime.Instance:
            clock.arm(store)
            return instantiate(artifact, store)

        qjs_engine.instantiate_wasm_artifact = armed  # type: ignore[attr-defined]
        qjs_transform.instantiate_wasm_artifact = armed  # type: ignore[attr-defined]
        shared._SHARED_ENGINE = engine
        _clock = clock
        atexit.register(_release_engine)  # while wasmtime's bindings still exist (after, its finalizer fails)
        return clock


def _release_engine() -> None:
    global _clock
    import quickjs_rs._wasmtime as shared

    with _engine_lock:
        shared._SHARED_ENGINE = None
        _clock = None


def _console_line(console: _Console) -> Any:
    """The host function behind the guest's `console.*`: one line per call, levels other than log/info marked."""

    def write(level: str, text: str) -> None:
        console.add((text if level in ("log", "info") else f"[{level}] {text}") + "\n")

    return write


def _execute(request: _Request, abort: _AbortFlag) -> CodeResult:
    try:
        clock = _configure_engine()
        from quickjs_rs import Runtime
    except ImportError as exc:  # pragma: no cover - checked in run_javascript; a broken install lands here
        return CodeResult(status="error", error=f"the JavaScript engine did not load: {exc}")
    except RuntimeError as exc:
        return CodeResult(status="error", error=f"the JavaScript engine is not usable: {exc}")
    deadline = time.monotonic() + request.timeout
    why: list[str] = []

    def interrupt() -> bool:
        if abort.is_set():
            why.append("aborted")
            return True
        if time.monotonic() >= deadline:
            why.append("timeout")
            return True
        return False

    modules = {**request.modules, request.entry: request.source}
    console = _Console()
    with clock.running(deadline + _EPOCH_MARGIN):
        runtime = Runtime(memory_limit=MEMORY_CEILING - _QJS_HEADROOM)
        runtime._engine_rt.set_interrupt_handler(interrupt)  # ours decides timeout vs abort
        runtime.set_module_loader(normalize=lambda base, spec: _resolve(modules, base, spec), load=modules.get)
        instance: Any = None
        try:
            try:  # making the context runs wasm too: the first run's compile may have used up its time
                context = runtime.new_context(timeout=request.timeout + 3600)  # our handler rules
                instance = context._engine_ctx._inst
                instance.store.set_limits(memory_size=MEMORY_CEILING)
                result = _evaluate(context, request, console)
            except BaseException as exc:
                result = _classify(exc, why, instance, abort, deadline)
            try:
                result.memory_used_bytes = instance.mem.data_len(instance.store)
            except Exception:
                pass
        finally:
            _close(runtime)
    console.fill(result)
    result.report = {"engine": engine_version(), "memory_held_bytes": result.memory_used_bytes}
    return result


def _evaluate(context: Any, request: _Request, console: _Console) -> CodeResult:
    if "console" in request.imports:
        context.register("__sandbox_console", _console_line(console), is_async=False)
        context.eval(_CONSOLE_PRELUDE)
    for name, value in request.globals.items():
        context.eval(f"globalThis[{json.dumps(name)}] = JSON.parse({json.dumps(json.dumps(value))});")
    driver = _DRIVER % {
        "entry": json.dumps(request.entry),
        "fn": json.dumps(request.fn),
        "args": json.dumps(json.dumps(request.args)),
    }
    text = asyncio.run(context.eval_async(driver))
    if text is not None and len(text) > RESULT_LIMIT:
        return CodeResult(status="error", error=f"the result is over the sandbox's limit of {RESULT_LIMIT} bytes")
    return CodeResult(status="ok", value=None if text is None else json.loads(text))


def _resolve(modules: dict[str, str], base: str, spec: str) -> str | None:
    """Relative and absolute specifiers inside the module map; nothing else resolves."""
    if spec.startswith(("./", "../")):
        base_dir = posixpath.dirname(base) if base.startswith("/") else "/"
        name = posixpath.normpath(posixpath.join(base_dir, spec))
    elif spec.startswith("/"):
        name = posixpath.normpath(spec)
    else:
        return None  # bare specifiers ("fs", "node:child_process") name host modules: none exist
    for candidate in (name, name + ".js", name + ".ts"):
        if candidate in modules:
            return candidate
    return None


def _classify(exc: BaseException, why: list[str], instance: Any, abort: _AbortFlag, deadline: float) -> CodeResult:
    import wasmtime
    from quickjs_rs import InterruptError, JSError, MemoryLimitError

    if why:
        status = why[0]
        message = "aborted" if status == "aborted" else "timed out"
        return CodeResult(status=status, error=message)  # type: ignore[arg-type]
    if _epoch_trap(exc) and time.monotonic() >= deadline:  # inside a native operation: the handler was not polled
        if abort.is_set():
            return CodeResult(status="aborted", error=abort.reason)
        return CodeResult(status="timeout", error="timed out")
    if isinstance(exc, MemoryLimitError) or _memory_exhausted(instance):
        return CodeResult(status="oom", error=f"out of memory (ceiling {MEMORY_CEILING} bytes)")
    if isinstance(exc, wasmtime.Trap):
        if exc.trap_code == wasmtime.TrapCode.STACK_OVERFLOW:
            return CodeResult(status="error", error="RangeError: Maximum call stack size exceeded")
        return CodeResult(status="error", error=f"engine trap: {exc.message.splitlines()[-1].strip()}")
    if isinstance(exc, InterruptError):
        return CodeResult(status="timeout", error="timed out")
    if isinstance(exc, JSError):
        if exc.name == "ReferenceError" and exc.message.startswith("Error resolving module"):
            message = f"{exc.message}: only modules of the module map can be imported"
            return CodeResult(status="error", error=message, stack=exc.stack)
        return CodeResult(status="error", error=f"{exc.name}: {exc.message}", stack=exc.stack)
    return CodeResult(status="error", error=f"{type(exc).__name__}: {exc}")


def _epoch_trap(exc: BaseException) -> bool:
    """The store passed its epoch deadline (wasmtime's "interrupt" trap), however quickjs-rs wrapped it."""
    import wasmtime

    seen: BaseException | None = exc
    for _ in range(8):  # the trap, or what a cleanup that trapped again raised from it
        if seen is None:
            return False
        if isinstance(seen, wasmtime.Trap) and seen.trap_code == wasmtime.TrapCode.INTERRUPT:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _memory_exhausted(instance: Any) -> bool:
    try:
        used: int = instance.mem.data_len(instance.store)  # quickjs-rs internals: untyped
        return used >= MEMORY_CEILING - _QJS_HEADROOM // 2
    except Exception:
        return False


def _close(runtime: Any) -> None:
    """Free every store of the run before its lease goes back, a trapped one (its wasm cannot run) too."""
    for context in list(runtime._contexts):
        try:
            context.close()
        except Exception:
            context._engine_ctx._inst.close()
            runtime._unregister_context(context)
    for instance in list(runtime._engine_rt._instances):  # one that trapped while its context was made
        try:
            instance.close()  # closes its store; runs no wasm
        except Exception:
            pass
    try:
        runtime.close()
    except Exception:
        pass
