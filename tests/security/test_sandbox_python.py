"""Hostile Python guests against Monty in its jail: each attack ends in a clean result and the host goes on.

Two layers are tested apart. The engine is the boundary: every route an earlier
attack run used against the fork server (frames, `object.__subclasses__()`, shared
memory, subprocesses, signals, prlimit, files, the network, floods) is tried from
guest code and must find nothing. The jail is the layer under it, for a bug in the
engine: what a worker process holds is read from the host through /proc.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from sandbox_support import running_workers, state, until, workers

from orchestrator.core.settings import SandboxSettings
from orchestrator.sandbox import RESULT_LIMIT, configure, run_code
from orchestrator.sandbox.python import shutdown

_SECRET_NAME = "ORCH_SANDBOX_TEST_API_KEY"
_SECRET = "sk-sandbox-0d9f3c2a7b1e4f58a6c0"


@pytest.fixture(autouse=True)
async def _fresh_workers():
    await shutdown()  # workers started before the test would predate its environment
    yield
    configure(SandboxSettings())
    await shutdown()


@pytest.fixture
def host_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(_SECRET_NAME, _SECRET)
    return _SECRET


async def _still_works() -> None:
    result = await run_code("6 * 7", language="python")
    assert (result.status, result.value) == ("ok", 42)


def _leaks(result, secret: str) -> bool:
    text = json.dumps(result.model_dump(mode="json"))
    return secret in text or secret[::-1] in text


# --- another run's memory (attack 1: bob read alice's result) ---------------------------------------------------

_ALICE = {"alice": 187000, "iban": "DE89370400440532013000"}
# The route of the attack run against the fork server: `os` and `sys` past the import guard, then up the frames to
# the server's supervising frame, whose shared result buffer still held the previous run's bytes.
_BYPASS = (
    "os_ = [c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__\n"
    "f = os_['sys']._getframe()\n"
    "while f is not None and 'result' not in f.f_locals:\n"
    "    f = f.f_back\n"
    "buffer = f.f_locals['result']\n"
)

_FIND_ALICE = {
    "the fork server's result buffer": _BYPASS + "bytes(buffer[:4096]).decode('latin-1')",
    "subclasses walk": "[c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__",
    "frames": "import sys\nf = sys._getframe()\nwhile f.f_back: f = f.f_back\nf.f_locals",
    "traceback frames": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    r = e.__traceback__.tb_frame.f_back\nr",
    "gc objects": "import gc\n[o for o in gc.get_objects() if isinstance(o, dict) and 'iban' in o]",
    "globals": "globals()",
    "vars": "vars()",
    "leftover name": "alice",
    "dunder class": "().__class__.__base__.__subclasses__()",
}


@pytest.mark.parametrize("route", list(_FIND_ALICE))
async def test_a_run_finds_nothing_of_the_run_before(route):
    first = await run_code("secret = data\nsecret", language="python", globals={"data": _ALICE})
    assert first.value == _ALICE
    second = await run_code(_FIND_ALICE[route], language="python")
    assert "DE89" not in json.dumps(second.model_dump(mode="json")), route
    assert second.status == "error", (route, second.status, second.value)


async def test_a_guest_cannot_forge_a_host_failure():
    """The buffer let a guest write the "isolation missing" marker: the host raised and stored its traceback."""
    wait = "os_['sys'].modules['importlib'].import_module('time').sleep(0.3)\n"  # the server has read our 'I'
    forged = _BYPASS + wait + "buffer[:8] = b'U forged'\nos_['_exit'](0)"
    result = await run_code(forged, language="python")  # raised SandboxUnavailable before
    assert result.status == "error"
    await _still_works()


async def test_a_worker_never_serves_a_second_run():
    """A fresh process per run: the worker a run used is gone once it has answered."""
    await _still_works()  # the pool is up, with its warm workers
    before = set(workers())
    await _still_works()
    assert await until(lambda: any(state(pid) == "gone" for pid in before))


# --- the host's environment and files ----------------------------------------------------------------------------

_ENV_ROUTES = {
    "os.environ": "import os\ndict(os.environ)",
    "os.getenv": f"import os\nos.getenv('{_SECRET_NAME}')",
    "__import__": "__import__('os').environ",
    "exec": "exec('import os')\nos.environ",
    "proc environ": "open('/proc/self/environ').read()",
    "parent environ": "open('/proc/1/environ').read()",
}


@pytest.mark.parametrize("route", list(_ENV_ROUTES))
async def test_guest_cannot_read_host_environment(route, host_secret):
    result = await run_code(_ENV_ROUTES[route], language="python")
    assert not _leaks(result, host_secret), route
    assert result.status == "error", (route, result.value)


@pytest.mark.parametrize(
    "source",
    [
        "open('/etc/passwd').read()",
        "open('/tmp/pwned', 'w').write('x')",
        "import pathlib\npathlib.Path('/etc/passwd').read_text()",
        "import os\nos.listdir('/')",
    ],
)
async def test_guest_cannot_read_or_write_files(source):
    result = await run_code(source, language="python")
    assert result.status == "error", result.value
    assert not Path("/tmp/pwned").exists()


# --- processes, signals, limits, network (attack 2: prlimit, kill, renice) ---------------------------------------

_CTYPES = (
    "os_ = [c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__\n"
    "imp = os_['sys'].modules['importlib'].import_module\n"
    "c = imp('ctypes')\nlibc = c.CDLL(None, use_errno=True)\n"
)


async def test_guest_cannot_change_the_host_s_limits():
    """prlimit64 was not in the seccomp deny list: the attack set the host's RLIMIT_CPU and got it killed."""
    import resource

    before = resource.getrlimit(resource.RLIMIT_MSGQUEUE)
    source = _CTYPES + (
        "class RL(c.Structure):\n    _fields_ = [('cur', c.c_ulong), ('max', c.c_ulong)]\n"
        "new = RL(12345, before[1])\n"
        "libc.prlimit(host_pid, 12, c.byref(new), None)\n"  # RLIMIT_MSGQUEUE
    )
    result = await run_code(source, language="python", globals={"host_pid": os.getpid(), "before": list(before)})
    assert resource.getrlimit(resource.RLIMIT_MSGQUEUE) == before
    assert result.status == "error"


async def test_guest_cannot_renice_the_host():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    source = _CTYPES + "libc.setpriority(0, host_pid, 19)\n"
    result = await run_code(source, language="python", globals={"host_pid": os.getpid()})
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    assert result.status == "error"


async def test_no_worker_outlives_the_pool():
    """A guest that cleared its parent-death signal outlived a killed fork server; workers die with the pool."""
    await _still_works()
    assert workers()
    await shutdown()
    assert await until(lambda: not workers())


@pytest.mark.parametrize(
    "attempt",
    [
        "import os\nos.kill(host_pid, 9)",
        "import os\nos.getpid()",
        "import signal\nsignal.pthread_kill",
        "import resource\nresource.prlimit(host_pid, resource.RLIMIT_CPU, (1, 1))",
        "import os\nos.setpriority(os.PRIO_PROCESS, host_pid, 19)",
        "import ctypes\nctypes.CDLL(None).prctl(1, 0)",
        "import subprocess\nsubprocess.run(['id'])",
        "import os\nos.system('touch /tmp/sandbox-escape')",
        "import multiprocessing",
        "import threading",
        "import mmap",
    ],
)
async def test_guest_cannot_name_signal_or_limit_a_process(attempt):
    result = await run_code(attempt, language="python", globals={"host_pid": os.getpid()})
    assert result.status == "error", (attempt, result.value)
    assert not os.path.exists("/tmp/sandbox-escape")
    await _still_works()


async def test_guest_cannot_connect_to_a_loopback_port():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    try:
        port = listener.getsockname()[1]
        for source in (f"import socket\nsocket.create_connection(('127.0.0.1', {port}))", "import urllib.request"):
            result = await run_code(source, language="python")
            assert result.status == "error" and "not allowed" in result.error
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


# --- what comes back ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "forgery",
    [
        "import json\njson.dumps = lambda value, allow_nan=False: '[' * 100000 + ']' * 100000\n1",
        "import json\njson.dumps = lambda value, allow_nan=False: 'not json'\n1",
        "import json\njson.dumps = lambda value, allow_nan=False: 7 ** 7\n1",
        "__sandbox_value = 'forged'\n__sandbox_text = '\"forged\"'",
    ],
)
async def test_whatever_the_guest_answers_is_a_guest_outcome(forgery):
    """The answer is the guest's to choose, never a host exception (deep JSON once raised RecursionError)."""
    result = await run_code(forgery, language="python")
    assert result.status in ("ok", "error")
    assert result.value != "forged"
    await _still_works()


async def test_a_huge_return_value_is_an_error_not_a_host_allocation():
    result = await run_code("'x' * (RESULT_LIMIT + 1)", language="python", globals={"RESULT_LIMIT": RESULT_LIMIT})
    assert result.status == "error" and str(RESULT_LIMIT) in result.error


async def test_deep_values_are_errors():
    result = await run_code("x = []\nfor _ in range(100000):\n    x = [x]\nx", language="python")
    assert result.status == "error"
    await _still_works()


# --- memory, CPU and output --------------------------------------------------------------------------------------

_PY_BOMBS = {
    "runaway loop": ("while True: pass", {"timeout"}),
    "sleeping forever": ("import time\ntime.sleep(3600)", {"timeout"}),
    "array bomb": ("a = []\nwhile True: a.append([0] * 4096)", {"oom"}),
    "string bomb": ("s = 'x'\nwhile True: s += s", {"oom"}),
    "bytearray bomb": ("b = []\nwhile True: b.append(bytearray(1 << 20))", {"oom", "error"}),
    "one huge allocation": ("bytes(1 << 32)", {"oom"}),
    "deep recursion": ("def f(n): return f(n + 1) + 1\nf(0)", {"error"}),
    "deep source": ("x = " + "[" * 5000 + "]" * 5000, {"error"}),
}


@pytest.mark.parametrize("name", list(_PY_BOMBS))
async def test_python_bombs_end_cleanly(name):
    source, statuses = _PY_BOMBS[name]
    result = await run_code(source, language="python", timeout=1.0)
    assert result.status in statuses, (result.status, result.error)
    await _still_works()


async def test_a_run_past_its_timeout_leaves_no_worker_computing():
    result = await run_code("while True: pass", language="python", timeout=0.5)
    assert result.status == "timeout"
    assert await until(lambda: not running_workers())


async def test_python_console_flood_is_capped():
    result = await run_code("while True: print('x' * 10000)", language="python", timeout=1.0)
    assert result.status == "timeout"
    flood = await run_code("for _ in range(1000): print('y' * 10000)\n1", language="python")
    assert flood.status == "ok" and flood.console_truncated and len(flood.console) == 64 * 1024


# --- the jail, from the host -------------------------------------------------------------------------------------


async def _a_worker() -> int:
    await _still_works()
    assert await until(lambda: bool(workers()))
    return workers()[0]


async def test_a_worker_holds_no_environment(host_secret):
    pid = await _a_worker()
    names = {entry.split(b"=", 1)[0] for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if entry}
    assert names <= {b"PWD"}, names


async def test_a_worker_lives_in_namespaces_of_its_own():
    pid = await _a_worker()
    for kind in ("user", "pid", "net", "ipc", "uts"):
        assert os.readlink(f"/proc/{pid}/ns/{kind}") != os.readlink(f"/proc/self/ns/{kind}"), kind
    nspid = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("NSpid:"))
    assert len(nspid.split()) == 3  # a pid here and one inside its own PID namespace: it sees no host process


async def test_a_worker_sees_only_its_binary_and_libraries():
    pid = await _a_worker()
    root = Path(f"/proc/{pid}/root")
    files = {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}
    assert "monty" in files
    assert all(name == "monty" or ".so" in name for name in files), files


async def test_a_worker_runs_under_rlimits():
    pid = await _a_worker()
    limits = {line[:26].strip(): line[26:].split()[0] for line in Path(f"/proc/{pid}/limits").read_text().splitlines()}
    assert limits["Max file size"] == "0" and limits["Max core file size"] == "0"
    assert int(limits["Max open files"]) <= 64
    assert int(limits["Max address space"]) <= 2**30


async def test_without_the_jail_runs_go_on_on_the_engine_alone():
    configure(SandboxSettings(python_jail="none"))
    result = await run_code("6 * 7", language="python", report=True)
    assert (result.status, result.value) == ("ok", 42)
    assert "bubblewrap" not in result.report["engine"]
