"""The Python fork server: one process per pool slot, one forked child per execution.

Started as ``python -I -S _child.py`` with an allow-listed environment (see
`python.py`): stdlib only, no site-packages, no host variable. It pre-imports
the allowed modules once, so each child starts warm (a fork, not an
interpreter start) and needs no file access to import.

Protocol on stdin/stdout, frames of 4-byte big-endian length + payload:

- host -> server: ``{"op": "run", "timeout", "memory_limit", "result_limit"}``
  followed by one frame with the request body, or ``{"op": "abort"}`` while a
  run is in flight;
- server -> host: ``{"op": "done", "verdict", "status", "maxrss"}`` followed by
  one frame with the raw bytes the child wrote on its result pipe.

The server never parses guest data, in either direction: the body goes into a
buffer that only the child decodes, and the child's bytes are copied to the
host as they are (the host decides what they mean). Both buffers are zeroed
after use, so a later child (a fork of this process) inherits no earlier run's
data. The server reads at most ``result_limit + 1`` bytes from a child and
kills it past that, and SIGKILLs it at the wall-clock deadline.

The child writes ``U`` + message if it could not isolate itself, else ``I``
and then, once, the guest's JSON result. The marker is written before guest
code runs, so nothing the guest writes can look like an isolation failure.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.abc
import importlib.util
import io
import json
import mmap
import os
import select
import signal
import struct
import sys
import sysconfig
import time
import traceback
from typing import TYPE_CHECKING, Any, Literal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if TYPE_CHECKING:  # run as a script, so at run time its neighbours come from sys.path
    from . import _isolation
    from ._frames import DoneHeader, GuestOutcome, GuestRequest, HostMessage, RunHeader, ServerMessage
else:
    import _isolation

_PRELOAD = (
    "math cmath json statistics re datetime decimal fractions itertools functools collections "
    "random string textwrap operator heapq bisect dataclasses enum typing copy calendar "
    "unicodedata base64 hashlib difflib zoneinfo _strptime encodings.idna"
).split()
_GUEST = "__sandbox__"
_NOT_STDLIB = {"site-packages", "dist-packages", "__pycache__"}
ISOLATED, UNAVAILABLE = b"I", b"U"


def _read_into(fd: int, view: memoryview) -> bool:
    """Fill `view` from `fd`; False at end of file. No bytes object is made of the data."""
    while view:
        got = os.readv(fd, [view])
        if not got:
            return False
        view = view[got:]
    return True


def _read_frame_size(fd: int) -> int | None:
    header = bytearray(4)
    return struct.unpack(">I", header)[0] if _read_into(fd, memoryview(header)) else None


def _read_message(fd: int) -> HostMessage | None:
    size = _read_frame_size(fd)
    if size is None:
        return None
    body = bytearray(size)
    if not _read_into(fd, memoryview(body)):
        return None
    message: HostMessage = json.loads(body)  # the host's own frames (see _frames.py)
    return message


def _write_frame(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(struct.pack(">I", len(data)))
    while view:
        view = view[os.write(fd, view) :]
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_message(fd: int, message: ServerMessage) -> None:
    _write_frame(fd, json.dumps(message).encode())


# --------------------------------------------------------------------------
# the server side
# --------------------------------------------------------------------------


def _stdlib_entries() -> list[str]:
    """What a child may read: the base interpreter's stdlib, minus its site-packages.

    The base prefix, not the venv's: a venv's platstdlib holds its site-packages.
    Landlock grants whole trees, so the stdlib folder's entries are granted one by one.
    """
    base = {
        "base": sys.base_prefix,
        "platbase": sys.base_exec_prefix,
        "installed_base": sys.base_prefix,
        "installed_platbase": sys.base_exec_prefix,
    }
    paths = sysconfig.get_paths(vars=base)
    roots = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib")}
    entries = []
    for root in sorted(root for root in roots if os.path.isdir(root)):
        entries += [os.path.join(root, name) for name in sorted(os.listdir(root)) if name not in _NOT_STDLIB]
    return entries


def serve() -> None:
    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    try:
        ruleset: int | str = _isolation.build_ruleset(_stdlib_entries())
    except (OSError, _isolation.IsolationError) as exc:
        ruleset = f"Landlock ruleset: {exc}"  # every child refuses to run, saying why
    _write_message(1, {"op": "ready", "pid": os.getpid()})
    result: mmap.mmap | None = None
    while True:
        request = _read_message(0)
        if request is None:
            return
        if request["op"] != "run":
            continue
        size = _read_frame_size(0)
        if size is None:
            return
        if result is None or len(result) != request["result_limit"] + 1:
            result = mmap.mmap(-1, request["result_limit"] + 1)  # pages exist once written
        body = bytearray(size)
        if not _read_into(0, memoryview(body)):
            return
        header, used = _supervise(request, body, ruleset, result)
        _write_message(1, header)
        with memoryview(result) as view:
            _write_frame(1, view[:used])
        result.madvise(mmap.MADV_DONTNEED)  # zero it and give the pages back


def _supervise(request: RunHeader, body: bytearray, ruleset: int | str, result: mmap.mmap) -> tuple[DoneHeader, int]:
    read_end, write_end = os.pipe()
    server = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child never returns
        os.close(read_end)
        _child_main(request, body, ruleset, write_end, server)
    os.close(write_end)
    body[:] = bytes(len(body))  # the request lives on in the child only
    deadline = time.monotonic() + request["timeout"]
    view, used = memoryview(result), 0  # released with the function's frame
    verdict: Literal["timeout", "aborted", "too_large"] | None = None
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
            got = os.readv(read_end, [view[used:]])
            if not got:
                break
            used += got
            if used == len(result):  # one byte past the limit: stop reading, stop the child
                verdict = "too_large"
    if verdict is not None:
        os.kill(pid, signal.SIGKILL)
    os.close(read_end)
    _, status, usage = os.wait4(pid, 0)
    return {"op": "done", "verdict": verdict, "status": status, "maxrss": usage.ru_maxrss * 1024}, used


# --------------------------------------------------------------------------
# the child side: isolate, then run the guest
# --------------------------------------------------------------------------


def _child_main(request: RunHeader, body: bytearray, ruleset: int | str, out_fd: int, server: int) -> None:
    try:
        _isolate(request, ruleset, out_fd, server)
    except BaseException as exc:
        _write_all(out_fd, UNAVAILABLE + str(exc).encode(errors="replace"))
        os._exit(0)
    _write_all(out_fd, ISOLATED)
    guest: GuestRequest = json.loads(body)  # the host's own frame (see _frames.py)
    _finish(out_fd, _run_guest(guest), request["result_limit"])


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _finish(out_fd: int, message: GuestOutcome, limit: int) -> None:
    try:
        data = json.dumps(message).encode()
    except (TypeError, ValueError) as exc:
        data = json.dumps({"status": "error", "error": f"result could not be encoded: {exc}"}).encode()
    if len(data) > limit:
        error = f"the result is {len(data)} bytes of JSON, over the sandbox's limit of {limit} bytes"
        data = json.dumps({"status": "error", "error": error}).encode()
    _write_all(out_fd, data)
    os._exit(0)


def _isolate(request: RunHeader, ruleset: int | str, out_fd: int, server: int) -> None:
    if isinstance(ruleset, str):
        raise _isolation.IsolationError(ruleset)
    _isolation.die_with_parent(server)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    keep = sorted((out_fd, ruleset))
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, 1 << 16)
    with open("/proc/self/statm") as statm:
        baseline = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _isolation.enter_namespaces()
    _isolation.restrict_filesystem(ruleset)
    os.close(ruleset)
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
        exec(code, module.__dict__)


def _guard_imports(allowed: set[str], guest_modules: set[str]) -> None:
    """Refuse guest imports outside `allowed`; a policy in front of the OS isolation, not the boundary.

    The importer is judged by the caller's frame, not by the `globals` argument
    (which the guest chooses): code counts as trusted only if its globals are
    the namespace of a real, non-guest module in `sys.modules`.
    """
    real_import = builtins.__import__

    def guarded(name, globals=None, locals=None, fromlist=(), level=0):  # type: ignore[no-untyped-def]
        if level == 0 and name.split(".")[0] not in allowed and _from_guest(sys._getframe(1).f_globals, guest_modules):
            raise ImportError(f"import of {name!r} is not allowed in the sandbox (see run_code's 'imports')")
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = guarded


def _from_guest(namespace: dict[str, Any], guest_modules: set[str]) -> bool:
    name = namespace.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    return module is None or vars(module) is not namespace or name in guest_modules or name == _GUEST


def _run_guest(request: GuestRequest) -> GuestOutcome:
    modules = {key[1:-3]: text for key, text in request["modules"].items()}
    sys.meta_path.insert(0, _MapFinder(modules))
    _guard_imports(set(request["imports"]) | set(modules), set(modules))
    console = _CappedText(request["console_limit"])
    sys.stdout = sys.stderr = console
    namespace: dict[str, Any] = {"__name__": _GUEST, "__builtins__": builtins, **request["globals"]}
    result: GuestOutcome
    try:
        value = _execute(request, namespace)
        text = json.dumps(value, allow_nan=False)
        result = {"status": "ok", "value": json.loads(text)}
    except MemoryError:
        namespace.clear()
        result = {"status": "oom", "error": "MemoryError: out of memory (ceiling reached)"}
    except RecursionError as exc:
        result = {"status": "error", "error": f"RecursionError: {exc}"}
    except BaseException as exc:
        namespace.clear()
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
        stack = "".join(line for line in frames if "_child.py" not in line)
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "stack": stack}
    result["console"] = "".join(console.parts)
    result["console_truncated"] = console.truncated
    return result


def _execute(request: GuestRequest, namespace: dict[str, Any]) -> object:
    """Run the module; then call `fn`, or (for fn 'default' without such a function)
    take the value of the module's last expression, as a calculator would."""
    tree = ast.parse(request["source"], filename=request["entry"])
    last = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        last = ast.Expression(final.value)
    exec(compile(tree, request["entry"], "exec"), namespace)
    tail = eval(compile(last, request["entry"], "eval"), namespace) if last else None
    target = namespace.get(request["fn"])
    if callable(target):
        return target(*request["args"])
    if request["fn"] != "default":
        raise NameError(f"the module defines no function {request['fn']!r}")
    return tail


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve()
