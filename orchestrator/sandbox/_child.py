"""The Python fork server: one process per pool slot, one forked child per execution.

Started as ``python -I -S _child.py``: stdlib only, no site-packages, no
environment. It pre-imports the allowed modules once, so each child starts
warm (a fork, not an interpreter start) and needs no file access to import.

Protocol on stdin/stdout: 4-byte big-endian length + JSON. Requests are
``{"op": "run", ...}`` or ``{"op": "abort"}`` (while a run is in flight);
each run gets one response. The server enforces the wall clock itself: it
SIGKILLs a child past its deadline.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.abc
import importlib.util
import io
import json
import os
import select
import signal
import struct
import sys
import sysconfig
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _isolation  # noqa: E402 - after the path above; the server runs without site-packages

_PRELOAD = (
    "math cmath json statistics re datetime decimal fractions itertools functools collections "
    "random string textwrap operator heapq bisect dataclasses enum typing copy calendar "
    "unicodedata base64 hashlib difflib zoneinfo _strptime encodings.idna"
).split()
_GUEST = "__sandbox__"


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks, got = [], 0
    while got < size:
        chunk = os.read(fd, size - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_message(fd: int) -> dict | None:
    header = _read_exact(fd, 4)
    if header is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", header)[0])
    return None if body is None else json.loads(body)


def _write_message(fd: int, message: dict) -> None:
    data = json.dumps(message).encode()
    os.write(fd, struct.pack(">I", len(data)) + data) if len(data) < 65536 else _write_all(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


# --------------------------------------------------------------------------
# the server side
# --------------------------------------------------------------------------


def serve() -> None:
    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _write_message(1, {"op": "ready", "pid": os.getpid()})
    while True:
        request = _read_message(0)
        if request is None:
            return
        if request.get("op") == "run":
            _write_message(1, _supervise(request))


def _supervise(request: dict) -> dict:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns
        os.close(read_end)
        _child_main(request, write_end)
    os.close(write_end)
    deadline = time.monotonic() + request["timeout"]
    chunks: list[bytes] = []
    verdict = None
    while verdict is None:
        left = deadline - time.monotonic()
        if left <= 0:
            verdict = "timeout"
            break
        ready, _, _ = select.select([read_end, 0], [], [], left)
        if 0 in ready:
            message = _read_message(0)
            if message is None or message.get("op") == "abort":
                verdict = "aborted"
        if read_end in ready:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    if verdict is not None:
        os.kill(pid, signal.SIGKILL)
    os.close(read_end)
    _, status, usage = os.wait4(pid, 0)
    response = _response(b"".join(chunks), status, verdict)
    response["memory_used_bytes"] = usage.ru_maxrss * 1024
    return response


def _response(data: bytes, status: int, verdict: str | None) -> dict:
    if verdict == "timeout":
        return {"status": "timeout", "error": "timed out (killed at the wall-clock deadline)"}
    if verdict == "aborted":
        return {"status": "aborted", "error": "aborted"}
    if data:
        try:
            return json.loads(data)
        except ValueError:
            pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return {"status": "timeout", "error": f"killed by {signal.Signals(sig).name} (CPU limit)"}
        return {"status": "error", "error": f"the interpreter died of {signal.Signals(sig).name}"}
    return {"status": "error", "error": f"the interpreter exited with status {os.waitstatus_to_exitcode(status)}"}


# --------------------------------------------------------------------------
# the child side: isolate, then run the guest
# --------------------------------------------------------------------------


def _child_main(request: dict, out_fd: int) -> None:
    try:
        _isolate(request, out_fd)
    except BaseException as exc:  # noqa: BLE001 - anything here means "do not run"
        _finish(out_fd, {"status": "unavailable", "error": str(exc)})
    _finish(out_fd, _run_guest(request))


def _finish(out_fd: int, message: dict) -> None:
    try:
        data = json.dumps(message).encode()
    except (TypeError, ValueError) as exc:
        data = json.dumps({"status": "error", "error": f"result could not be encoded: {exc}"}).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(out_fd, view) :]
    os._exit(0)


def _isolate(request: dict, out_fd: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, out_fd)
    os.closerange(out_fd + 1, 1 << 16)
    with open("/proc/self/statm") as statm:
        baseline = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _isolation.enter_namespaces()
    paths = sysconfig.get_paths()
    readable = sorted({p for p in (paths["stdlib"], paths["platstdlib"]) if os.path.isdir(p)})
    _isolation.restrict_filesystem(readable)
    _isolation.install_seccomp()
    cpu = int(request["timeout"]) + 2
    _isolation.set_rlimits(baseline + request["memory_limit"], cpu)


class _CappedText(io.TextIOBase):
    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.size, self.limit, self.truncated = 0, limit, False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        room = self.limit - self.size
        if len(text) > room:
            self.truncated = True
        kept = text[: max(room, 0)]
        self.parts.append(kept)
        self.size += len(kept)
        return len(text)


class _MapFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the guest's module map ('./helpers.py' -> `import helpers`)."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name in self.sources:
            return importlib.util.spec_from_loader(name, self, origin=f"/{name}.py")
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return None

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        code = compile(self.sources[module.__name__], f"/{module.__name__}.py", "exec")
        exec(code, module.__dict__)  # noqa: S102 - inside the isolated child


def _guard_imports(allowed: set[str], guest_modules: set[str]) -> None:
    real_import = builtins.__import__

    def guarded(name, globals=None, locals=None, fromlist=(), level=0):  # type: ignore[no-untyped-def]
        importer = (globals or {}).get("__name__", "")
        top = name.split(".")[0]
        if (importer == _GUEST or importer in guest_modules) and level == 0 and top not in allowed:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox (see run_code's 'imports')")
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = guarded


def _run_guest(request: dict) -> dict:
    modules = {key[1:-3]: text for key, text in request["modules"].items()}
    sys.meta_path.insert(0, _MapFinder(modules))
    _guard_imports(set(request["imports"]) | set(modules), set(modules))
    console = _CappedText(request["console_limit"])
    sys.stdout = sys.stderr = console
    namespace: dict = {"__name__": _GUEST, "__builtins__": builtins, **request["globals"]}
    try:
        value = _execute(request, namespace)
        text = json.dumps(value, allow_nan=False)
        result = {"status": "ok", "value": json.loads(text)}
    except MemoryError:
        namespace.clear()
        result = {"status": "oom", "error": "MemoryError: out of memory (ceiling reached)"}
    except RecursionError as exc:
        result = {"status": "error", "error": f"RecursionError: {exc}"}
    except BaseException as exc:  # noqa: BLE001 - the guest's error is the result
        namespace.clear()
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
        stack = "".join(line for line in frames if "_child.py" not in line)
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "stack": stack}
    result["console"] = "".join(console.parts)
    result["console_truncated"] = console.truncated
    return result


def _execute(request: dict, namespace: dict) -> object:
    """Run the module; then call `fn`, or (for fn 'default' without such a function)
    take the value of the module's last expression, as a calculator would."""
    tree = ast.parse(request["source"], filename=request["entry"])
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, request["entry"], "exec"), namespace)  # noqa: S102
    tail = eval(compile(last, request["entry"], "eval"), namespace) if last else None  # noqa: S307
    target = namespace.get(request["fn"])
    if callable(target):
        return target(*request["args"])
    if request["fn"] != "default":
        raise NameError(f"the module defines no function {request['fn']!r}")
    return tail


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve()
