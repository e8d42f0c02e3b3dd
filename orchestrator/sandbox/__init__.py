"""Sandboxed code execution: the engine behind `ThreadState.run_code`.

Two engines, one contract (`run_code` -> `CodeExecution` -> `CodeResult`):

- ``javascript`` / ``typescript``: QuickJS-ng compiled to WebAssembly and run
  by wasmtime (the ``quickjs-rs`` package), see `javascript.py`. Chosen over
  V8 (``mini-racer``) because V8 there cannot load ES modules and its hard
  memory limit ignores ArrayBuffers (both checked: a 400 MiB ArrayBuffer bomb
  passed a 64 MiB limit); QuickJS loads in-memory ES modules and TypeScript
  through a host loader, and the wasm linear memory gives a ceiling that
  counts every byte the guest holds.
- ``python``: Monty (the ``pydantic-monty`` package), an interpreter of a subset
  of Python written in Rust for model-written code, in a fresh worker process per
  run, jailed by bubblewrap as defence in depth; see `python.py`. Chosen over
  CPython on WASI and over our own fork server (docs/security.md compares them):
  the guest has no system call and no introspection to begin with.

One budget bounds the whole process (`configure`, from ``runtime.sandbox``):
at most N runs per language at once and a total memory budget, each run
reserving the memory ceiling. A run beyond it waits, and the wait counts
against its own timeout: `timeout` bounds the whole call, so a run that
cannot start in time ends as a "timeout" result saying it waited.

Bad options are programming errors of the caller (the tool author), so they
raise `ValueError` naming the option, synchronously from `run_code`. Errors of
the guest code (syntax, exceptions, timeouts, memory) are results, never
exceptions. A jail that cannot start raises `SandboxUnavailable` when awaited.

The ``imports`` allowlists (capabilities the host grants the guest):

- JavaScript: ``"console"`` (console.log/info/warn/error/debug, captured).
  Default: ``["console"]``. ``Math``, ``JSON`` and ``Date`` are language
  built-ins and always present; no file, network or timer capability exists.
- Python: the modules in `PYTHON_IMPORTS` (what Monty provides, less ``os``,
  ``sys`` and ``pathlib``). Default: all of them. An ``import`` of anything
  else raises ImportError where it stands (a policy: no module of the engine
  reaches the host anyway).
"""

from __future__ import annotations

import asyncio
import json
import keyword
import posixpath
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from orchestrator.core import tracing
from orchestrator.core.settings import SandboxSettings
from orchestrator.sandbox._budget import Budget, BudgetTimeout

__all__ = [
    "JAVASCRIPT_IMPORTS",
    "MEMORY_CEILING",
    "PYTHON_IMPORTS",
    "RESULT_LIMIT",
    "AbortLike",
    "CodeExecution",
    "CodeResult",
    "SandboxUnavailable",
    "configure",
    "current_settings",
    "run_code",
]

MEMORY_CEILING = 128 * 1024 * 1024
CONSOLE_LIMIT = 64 * 1024  # bytes of console/stdout kept per execution
RESULT_LIMIT = 8 * 1024 * 1024  # bytes of JSON result (value, error, console) read from a guest
LANGUAGES = ("javascript", "typescript", "python")
JAVASCRIPT_IMPORTS = frozenset({"console"})
PYTHON_IMPORTS = frozenset(
    {
        "asyncio",
        "base64",
        "binascii",
        "bisect",
        "collections",
        "copy",
        "csv",
        "dataclasses",
        "datetime",
        "decimal",
        "functools",
        "hashlib",
        "itertools",
        "json",
        "math",
        "random",
        "re",
        "time",
        "tomllib",
        "typing",
        "unicodedata",
    }
)

Status = Literal["ok", "error", "timeout", "oom", "aborted"]
_budget = Budget(SandboxSettings(), MEMORY_CEILING)
_settings = SandboxSettings()


def configure(settings: SandboxSettings) -> None:
    """Set this process's sandbox budget (the runtime calls it with ``runtime.sandbox`` on open)."""
    global _settings
    _settings = settings
    _budget.configure(settings)


def current_settings() -> SandboxSettings:
    """The ``runtime.sandbox`` settings this process runs with (the engines read their jail and pool size here)."""
    return _settings


class SandboxUnavailable(RuntimeError):
    """The machine cannot provide an isolation the sandbox relies on (fail closed); the message says how to fix it."""


class AbortLike(Protocol):
    """What `run_code` needs of the thread's abort signal."""

    @property
    def aborted(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


class CodeResult(BaseModel):
    """The outcome of one execution; its JSON form is what tools and events carry."""

    status: Status
    value: Any = None
    error: str | None = None
    stack: str | None = None
    console: str = ""
    console_truncated: bool = False
    duration_ms: float = 0.0
    memory_used_bytes: int | None = None
    report: dict[str, Any] | None = None


class _Request(BaseModel):
    """Validated options, as the engines receive them."""

    source: str
    fn: str
    args: list[Any]
    imports: list[str]
    globals: dict[str, Any]
    modules: dict[str, str]  # canonical absolute names ("/math.js") -> source
    language: str
    entry: str  # canonical name of the entry module
    memory_requested: int | None
    timeout: float
    report: bool


class _AbortFlag:
    """Set once; the engines poll `is_set` and may register a callback."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._set = False
        self._callbacks: list[Callable[[], object]] = []

    def is_set(self) -> bool:
        return self._set

    def set(self, reason: str | None) -> None:
        if self._set:
            return
        self._set, self.reason = True, reason
        for callback in self._callbacks:
            callback()

    def on_set(self, callback: Callable[[], object]) -> None:
        self._callbacks.append(callback)
        if self._set:
            callback()


class _Console:
    """What a guest prints, kept up to `CONSOLE_LIMIT` characters (both engines write here)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.truncated = False

    def add(self, text: str) -> None:
        room = CONSOLE_LIMIT - self.size
        if len(text) > room:
            text, self.truncated = text[: max(room, 0)], True
        if text:
            self.parts.append(text)
            self.size += len(text)

    def fill(self, result: CodeResult) -> None:
        result.console = "".join(self.parts)
        result.console_truncated = self.truncated


class CodeExecution:
    """A running execution: `await` it for the `CodeResult`, `abort()` to stop it."""

    def __init__(self, request: _Request, abort_signal: AbortLike | None) -> None:
        self._request = request
        self._abort = _AbortFlag()
        self._task = asyncio.get_running_loop().create_task(self._run(abort_signal))

    def abort(self, reason: str | None = None) -> None:
        """Stop the guest; the result's status becomes "aborted" (if it had not finished)."""
        self._abort.set(reason or "aborted")

    def done(self) -> bool:
        return self._task.done()

    @property
    def language(self) -> str:
        return self._request.language

    def __await__(self) -> Generator[Any, None, CodeResult]:
        return self._task.__await__()

    @tracing.code_run
    async def _run(self, abort_signal: AbortLike | None) -> CodeResult:
        watcher = None
        if abort_signal is not None:
            if abort_signal.aborted:
                self._abort.set(str(getattr(abort_signal, "reason", None) or "aborted"))
            else:
                watcher = asyncio.ensure_future(self._watch(abort_signal))
        started = time.perf_counter()
        try:
            result = await self._run_within_budget(started)
        finally:
            if watcher is not None:
                watcher.cancel()
        result.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        result.report = _report(self._request, result.report) if self._request.report else None
        return _as_text(result)

    async def _run_within_budget(self, started: float) -> CodeResult:
        """Wait for a share of the budget (within the timeout), then run on what is left of it."""
        request = self._request
        if self._abort.is_set():
            return CodeResult(status="aborted", error=self._abort.reason)
        kind = "python" if request.language == "python" else "javascript"
        try:
            lease = await _budget.acquire(kind, request.timeout, self._abort.on_set)
        except BudgetTimeout as exc:
            return CodeResult(status="timeout", error=str(exc))
        if lease is None:
            return CodeResult(status="aborted", error=self._abort.reason)
        waited = time.perf_counter() - started
        if waited > 0.001:
            request = request.model_copy(update={"timeout": max(request.timeout - waited, 0.001)})
        if request.language == "python":
            from orchestrator.sandbox.python import run_python as engine
        else:
            from orchestrator.sandbox.javascript import run_javascript as engine
        return await engine(request, self._abort, lease)

    async def _watch(self, abort_signal: AbortLike) -> None:
        await abort_signal.wait()
        self._abort.set(str(getattr(abort_signal, "reason", None) or "aborted"))


def _as_text(result: CodeResult) -> CodeResult:
    """The result, or an error result naming its parts that are not valid UTF-8 text.

    Why: a guest string may hold a lone surrogate (``'\\uD800'`` in
    JavaScript, ``chr(0xD800)`` in Python); Python carries it, no storage can
    write it, and a tool result that failed to store left its thread running.
    """
    texts = {"value": json.dumps(result.value, ensure_ascii=False), "error": result.error, "stack": result.stack}
    texts.update(console=result.console, report=json.dumps(result.report, ensure_ascii=False))
    bad = []
    for name, text in texts.items():
        try:
            (text or "").encode("utf-8")
        except UnicodeEncodeError:
            bad.append(name)
    if not bad:
        return result

    def escaped(text: str | None) -> str | None:
        return None if text is None else text.encode("utf-8", "backslashreplace").decode("utf-8")

    error = (
        f"the run's {', '.join(bad)}: not valid UTF-8 text (a string holds a lone surrogate, such as \\ud800); "
        "return well-formed strings"
    )
    if result.status != "ok":
        error += f". The run ended {result.status!r}: {escaped(result.error)}"
    update: dict[str, Any] = {"status": "error", "error": error, "value": None, "stack": escaped(result.stack)}
    update.update(console=escaped(result.console), report=None if "report" in bad else result.report)
    return result.model_copy(update=update)


def run_code(
    source: str,
    *,
    execute: dict[str, Any] | None = None,
    imports: list[str] | None = None,
    globals: dict[str, Any] | None = None,
    modules: dict[str, str] | None = None,
    language: str = "javascript",
    memory_limit_bytes: int | None = None,
    filename: str | None = None,
    report: bool = False,
    timeout: float = 5.0,
    abort_signal: AbortLike | None = None,
) -> CodeExecution:
    """Start `source` in a sandbox; must be called with an event loop running.

    Raises ValueError (naming the option) for bad options; everything that goes
    wrong inside the guest comes back as a `CodeResult`.
    """
    if not isinstance(source, str):
        raise ValueError(f"run_code: 'source' must be a string, got {type(source).__name__}")
    language = _check_language(language, filename)
    fn, args = _check_execute(execute)
    request = _Request(
        source=source,
        fn=fn,
        args=args,
        imports=_check_imports(imports, language),
        globals=_check_globals(globals),
        modules=_check_modules(modules, language),
        language=language,
        entry=_entry_name(filename, language),
        memory_requested=_check_memory(memory_limit_bytes),
        timeout=_check_timeout(timeout),
        report=bool(report),
    )
    return CodeExecution(request, abort_signal)


def _report(request: _Request, engine_report: dict[str, Any] | None) -> dict[str, Any]:
    """What was asked and what held; the engine adds its name and the memory it held."""
    return {
        "language": request.language,
        "memory_limit_bytes_requested": request.memory_requested,
        "memory_limit_bytes_applied": MEMORY_CEILING,
        "memory_ceiling_bytes": MEMORY_CEILING,
        # the ceiling cannot be lowered, and a higher request is clamped to it
        "memory_limit_clamped": (request.memory_requested or 0) > MEMORY_CEILING,
        "memory_limit_raised_to_ceiling": 0 < (request.memory_requested or MEMORY_CEILING) < MEMORY_CEILING,
        "timeout_s": request.timeout,
        "imports": request.imports,
        "entry": request.entry,
        **(engine_report or {}),
    }


# --------------------------------------------------------------------------
# option checks
# --------------------------------------------------------------------------


def _check_language(language: str, filename: str | None) -> str:
    if language not in LANGUAGES:
        raise ValueError(f"run_code: 'language' must be one of {LANGUAGES}, got {language!r}")
    if filename is not None:
        if not isinstance(filename, str) or not filename or "/" in filename or "\\" in filename:
            raise ValueError(f"run_code: 'filename' must be a bare file name, got {filename!r}")
        if language == "javascript" and filename.endswith((".ts", ".mts", ".cts", ".tsx")):
            return "typescript"
    return language


def _check_execute(execute: dict[str, Any] | None) -> tuple[str, list[Any]]:
    if execute is None:
        return "default", []
    if not isinstance(execute, dict) or set(execute) - {"fn", "args"}:
        raise ValueError("run_code: 'execute' must be a dict {'fn': str, 'args': list}")
    fn = execute.get("fn", "default")
    args = execute.get("args", [])
    if not isinstance(fn, str) or not (fn.isidentifier() and not keyword.iskeyword(fn)):
        raise ValueError(f"run_code: 'execute.fn' must be an identifier, got {fn!r}")
    if not isinstance(args, list | tuple):
        raise ValueError(f"run_code: 'execute.args' must be a list, got {type(args).__name__}")
    _check_json(list(args), "execute.args")
    return fn, list(args)


def _check_imports(imports: list[str] | None, language: str) -> list[str]:
    allowed = PYTHON_IMPORTS if language == "python" else JAVASCRIPT_IMPORTS
    if imports is None:
        return sorted(allowed)
    if isinstance(imports, str) or not all(isinstance(name, str) for name in imports):  # type: ignore[unreachable]  # model input
        raise ValueError("run_code: 'imports' must be a list of names")
    unknown = sorted(set(imports) - allowed)
    if unknown:
        raise ValueError(f"run_code: 'imports' names {unknown} outside the {language} allowlist {sorted(allowed)}")
    return sorted(set(imports))


def _check_globals(values: dict[str, Any] | None) -> dict[str, Any]:
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError("run_code: 'globals' must be a dict of name -> JSON value")
    for name in values:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"run_code: 'globals' key {name!r} is not an identifier")
    _check_json(values, "globals")
    return dict(values)


def _check_json(value: Any, option: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"run_code: '{option}' must be JSON-serialisable: {exc}") from None


def _check_modules(modules: dict[str, str] | None, language: str) -> dict[str, str]:
    """Map './a/b.js' keys to canonical '/a/b.js'; refuse keys that leave the map's root."""
    if modules is None:
        return {}
    if not isinstance(modules, dict):
        raise ValueError("run_code: 'modules' must be a dict of './path' -> source")
    out: dict[str, str] = {}
    for key, text in modules.items():
        if not isinstance(key, str) or not isinstance(text, str):
            raise ValueError(f"run_code: 'modules' entry {key!r} must map a path to source text")
        if not key.startswith("./") or "\\" in key or "\0" in key:
            raise ValueError(f"run_code: 'modules' path {key!r} must be relative and start with './'")
        canonical = posixpath.normpath("/" + key[2:])
        if canonical.startswith("/..") or canonical == "/" or ".." in key.split("/"):
            raise ValueError(f"run_code: 'modules' path {key!r} escapes the module map")
        if language == "python" and not _python_module_name(canonical):
            raise ValueError(
                f"run_code: 'modules' path {key!r}: Python modules are './name.py' with an identifier name"
            )
        out[canonical] = text
    return out


def _python_module_name(canonical: str) -> str | None:
    name = canonical[1:]
    if "/" in name or not name.endswith(".py"):
        return None
    stem = name[:-3]
    return stem if stem.isidentifier() and not keyword.iskeyword(stem) else None


def _entry_name(filename: str | None, language: str) -> str:
    default = {"javascript": "main.js", "typescript": "main.ts", "python": "main.py"}[language]
    return "/" + (filename or default)


def _check_memory(memory_limit_bytes: int | None) -> int | None:
    if memory_limit_bytes is None:
        return None
    if isinstance(memory_limit_bytes, bool) or not isinstance(memory_limit_bytes, int):
        raise ValueError("run_code: 'memory_limit_bytes' must be an int")
    if memory_limit_bytes <= 0:
        raise ValueError("run_code: 'memory_limit_bytes' must be positive")
    return memory_limit_bytes


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300:
        raise ValueError(f"run_code: 'timeout' must be seconds in (0, 300], got {timeout!r}")
    return float(timeout)
