"""Hostile Python guests: each attack ends in a clean result and the host goes on.

Most cases reach `os` and `importlib` through the classic
`object.__subclasses__()` walk, i.e. past the import allowlist, so what is
tested is the operating-system isolation, not the allowlist.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import sysconfig
from pathlib import Path

import pytest

from orchestrator.sandbox import RESULT_LIMIT, SandboxUnavailable, run_code
from orchestrator.sandbox._isolation import landlock_abi
from orchestrator.sandbox.python import shutdown

_BYPASS = (
    "os_ = [c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__\n"
    "imp = os_['sys'].modules['importlib'].import_module\n"
)
_SECRET_NAME = "ORCH_SANDBOX_TEST_API_KEY"
_SECRET = "sk-sandbox-0d9f3c2a7b1e4f58a6c0"


@pytest.fixture(autouse=True)
async def _fresh_fork_servers():
    await shutdown()  # a server started before the test would predate its environment
    yield
    await shutdown()


@pytest.fixture
def host_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(_SECRET_NAME, _SECRET)
    return _SECRET


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    yield server
    server.close()


async def _still_works() -> None:
    result = await run_code("6 * 7", language="python")
    assert (result.status, result.value) == ("ok", 42)


def _leaks(result, secret: str) -> bool:
    text = json.dumps(result.model_dump(mode="json"))
    return secret in text or secret[::-1] in text


# --- the host's environment ------------------------------------------------------

_ENV_ROUTES = {
    "import trick": "os = __import__('os', {'__name__': 'x'})\ndict(os.environ)",
    "import trick, from-list": "environ = __import__('os', {}, {}, ['environ']).environ\ndict(environ)",
    "exec with fake globals": "g = {'__name__': 'json'}\nexec('import os', g)\ndict(g['os'].environ)",
    "os.environ past the guard": _BYPASS + "dict(os_['environ'])",
    "posix.environ": _BYPASS + "{k.decode(): v.decode() for k, v in imp('posix').environ.items()}",
    "libc getenv": _BYPASS + "c = imp('ctypes')\nlibc = c.CDLL(None)\nlibc.getenv.restype = c.c_char_p\n"
    f"str(libc.getenv(b'{_SECRET_NAME}'))",
}


@pytest.mark.parametrize("route", list(_ENV_ROUTES))
async def test_guest_cannot_read_host_environment_in_memory(route, host_secret):
    result = await run_code(_ENV_ROUTES[route], language="python")
    assert not _leaks(result, host_secret), route
    if result.status == "ok" and isinstance(result.value, dict):  # the route worked: only the allow-list
        assert set(result.value) <= {"PATH", "LANG", "LC_ALL"}, result.value


_PROC_READ = _BYPASS + (
    "def read(path):\n"
    "    try:\n"
    "        fd = os_['open'](path, os_['O_RDONLY'])\n"
    "        return os_['read'](fd, 1 << 20).decode('latin-1')\n"
    "    except OSError as exc:\n"
    "        return type(exc).__name__\n"
)


async def test_guest_cannot_read_environ_of_itself_parent_or_grandparent(host_secret):
    source = _PROC_READ + (
        "[read('/proc/self/environ'), read(f'/proc/{os_[\"getppid\"]()}/environ'),"
        " read(f'/proc/{host_pid}/environ'), read('/proc/1/environ')]"
    )
    result = await run_code(source, language="python", globals={"host_pid": os.getpid()})
    assert result.status == "ok", result.error
    assert not _leaks(result, host_secret)
    for text in result.value:
        assert text == "PermissionError" or _SECRET_NAME not in text, text


async def test_fork_server_environment_is_the_allow_list(host_secret):
    """The fork server itself (the guest's parent, outside the sandbox) holds no host variable."""
    await _still_works()
    servers = _fork_servers()
    assert servers, "no fork server found"
    for pid in servers:
        entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {entry.split(b"=", 1)[0].decode() for entry in entries if entry}
        assert names <= {"PATH", "LANG", "LC_ALL"}, names


def _children_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
    return found


def _fork_servers() -> list[int]:
    """This process's live Python fork servers (other children, e.g. of other tests, are not)."""
    servers = []
    for pid in _children_of(os.getpid()):
        try:
            if b"_child.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                servers.append(pid)
        except OSError:
            continue
    return servers


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


# --- the result channel --------------------------------------------------------

_FLOOD = _BYPASS + (
    "chunk = b'x' * 65536\n"
    "for fd in range(3, 64):\n"
    "    try:\n"
    "        os_['fstat'](fd)\n"
    "    except OSError:\n"
    "        continue\n"
    "    try:\n"
    "        while True:\n"
    "            os_['write'](fd, chunk)\n"
    "    except OSError:\n"
    "        pass\n"
)


async def test_result_channel_flood_is_bounded(host_secret):
    await _still_works()  # start the fork server so that its peak is measured from here
    [server] = _fork_servers()
    result = await run_code(_FLOOD, language="python", timeout=2.0)
    assert result.status == "error", (result.status, result.error)
    assert "result" in result.error and str(RESULT_LIMIT) in result.error
    assert _peak_rss(server) < 3 * RESULT_LIMIT + 64 * 2**20  # before: grew at ~1 GB/s until the timeout
    assert _peak_rss(os.getpid()) < 2 * 2**30
    await _still_works()


@pytest.mark.parametrize(
    "forged",
    [
        b'{"status": "unavailable", "error": "forged"}',
        b'U{"status": "unavailable", "error": "forged"}',
        b'{"status": "ok", "value": 1, "report": {"engine": "forged"}, "duration_ms": -1}',
        b"\xff\xfe not json",
    ],
)
async def test_whatever_the_guest_writes_on_the_channel_is_a_guest_outcome(forged):
    source = _BYPASS + (
        "for fd in range(3, 64):\n"
        "    try:\n"
        f"        os_['write'](fd, {forged!r})\n"
        "    except OSError:\n"
        "        pass\n"
        "os_['_exit'](0)\n"
    )
    try:
        result = await run_code(source, language="python")
    except SandboxUnavailable as exc:  # before: the forged status became a host exception
        pytest.fail(f"a guest write raised in the host: {exc}")
    assert result.status == "error", (result.status, result.error)
    assert "result" in result.error
    await _still_works()


async def test_a_guest_written_result_keeps_the_console_cap():
    forged = json.dumps({"status": "ok", "value": 1, "console": "z" * (1 << 20)}).encode()
    source = _BYPASS + (
        "def alive(n):\n    try:\n        os_['fstat'](n)\n        return True\n    except OSError:\n        return False\n"  # noqa: E501
        f"fd = [n for n in range(3, 64) if alive(n)][0]  # the result pipe is the only one left open\n"
        f"os_['write'](fd, {forged!r})\nos_['_exit'](0)\n"
    )
    result = await run_code(source, language="python")
    assert (result.status, result.value) == ("ok", 1)
    assert len(result.console) == 64 * 1024 and result.console_truncated


async def test_a_huge_return_value_is_an_error_not_a_host_allocation():
    result = await run_code("'x' * (RESULT_LIMIT + 1)", language="python", globals={"RESULT_LIMIT": RESULT_LIMIT})
    assert result.status == "error" and str(RESULT_LIMIT) in result.error


# --- the filesystem ---------------------------------------------------------------


def _site_packages() -> list[str]:
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths(vars=base)["purelib"]}
    return sorted(path for path in paths if os.path.isdir(path))


async def test_only_the_standard_library_is_readable():
    source = _PROC_READ + "[read(path) for path in paths]"
    probes = []
    for folder in _site_packages():
        entries = sorted(Path(folder).iterdir())
        files = [str(p) for p in entries if p.is_file()] or [str(next(p for p in Path(folder).rglob("*.py")))]
        probes.append(files[0])
    assert probes, "no site-packages to probe"
    result = await run_code(source, language="python", globals={"paths": probes})
    assert result.status == "ok", result.error
    assert result.value == ["PermissionError"] * len(probes), (probes, result.value)
    listing = await run_code(_BYPASS + "os_['listdir'](p)", language="python", globals={"p": _site_packages()[0]})
    assert listing.status == "error" and "PermissionError" in listing.error
    stdlib = await run_code(_PROC_READ + "read(os_['__file__'])[:100]", language="python")
    assert stdlib.status == "ok" and "PermissionError" not in stdlib.value  # the stdlib itself stays readable


async def test_python_cannot_read_files():
    plain = await run_code("open('/etc/passwd').read()", language="python")
    raw = await run_code(_BYPASS + "os_['open']('/etc/passwd', 0)", language="python")
    listing = await run_code(_BYPASS + "os_['listdir']('/')", language="python")
    for result in (plain, raw, listing):
        assert result.status == "error" and "PermissionError" in result.error, result.error


async def test_python_cannot_write_files(tmp_path: Path):
    target = tmp_path / "pwned"
    source = _BYPASS + f"fd = os_['open']({str(target)!r}, os_['O_WRONLY'] | os_['O_CREAT'])\nos_['write'](fd, b'x')"
    result = await run_code(source, language="python")
    assert result.status == "error" and "PermissionError" in result.error
    assert not target.exists()


def test_the_machine_provides_landlock():
    assert landlock_abi() >= 1  # the Python sandbox fails closed without it


# --- network and processes -----------------------------------------------------------


async def test_python_cannot_connect_to_a_loopback_port(listener):
    port = listener.getsockname()[1]
    guarded = await run_code(f"import socket\nsocket.create_connection(('127.0.0.1', {port}))", language="python")
    assert guarded.status == "error" and "not allowed" in guarded.error
    source = _BYPASS + f"imp('socket').create_connection(('127.0.0.1', {port}), timeout=1)"
    result = await run_code(source, language="python")
    assert result.status == "error" and ("PermissionError" in result.error or "OSError" in result.error)
    with pytest.raises(BlockingIOError):
        listener.accept()


@pytest.mark.parametrize(
    "attempt",
    [
        "imp('subprocess').run(['id'])",
        "os_['system']('touch /tmp/sandbox-escape')",
        "os_['fork']()",
        "os_['execv']('/bin/sh', ['sh', '-c', 'id'])",
        "os_['kill'](os_['getppid'](), 9)",
        "os_['kill'](host_pid, 9)",
    ],
)
async def test_python_cannot_spawn_or_signal(attempt):
    result = await run_code(_BYPASS + attempt, language="python", globals={"host_pid": os.getpid()})
    if result.status == "ok":  # os.system reports the failed spawn as exit status 127
        assert result.value == 127 << 8
    else:
        assert result.status == "error" and "PermissionError" in result.error, result.error
    assert not os.path.exists("/tmp/sandbox-escape")
    await _still_works()


async def test_python_import_outside_the_module_map_is_refused():
    modules = {"./helpers.py": "import os\n"}
    result = await run_code("import helpers", language="python", modules=modules)
    assert result.status == "error" and "'os' is not allowed" in result.error
    with pytest.raises(ValueError, match="modules"):
        run_code("1", language="python", modules={"../../etc/passwd.py": "x"})


@pytest.mark.parametrize(
    "source",
    [
        "__import__('os', {'__name__': 'x'})",
        "__import__('os', {}, {}, ['environ'])",
        "g = {'__name__': 'json'}\nexec('import os', g)",
    ],
)
async def test_import_guard_is_not_fooled_by_fake_globals(source):
    result = await run_code(source, language="python")
    assert result.status == "error" and "'os' is not allowed" in result.error, (result.status, result.error)


async def test_python_child_runs_unprivileged_in_its_own_user_namespace():
    result = await run_code(_BYPASS + "os_['getuid']()", language="python")
    assert (result.status, result.value) == ("ok", 65534)  # unmapped: no privilege outside


# --- memory, CPU and output -----------------------------------------------------------

_PY_BOMBS = {
    "runaway loop": ("while True: pass", {"timeout"}),
    "sleeping forever": (_BYPASS + "imp('time').sleep(3600)", {"timeout"}),
    "array bomb": ("a = []\nwhile True: a.append([0] * 4096)", {"oom"}),
    "string bomb": ("s = 'x'\nwhile True: s += s", {"oom"}),
    "bytearray (ArrayBuffer) bomb": ("b = []\nwhile True: b.append(bytearray(1 << 20))", {"oom"}),
    "one huge allocation": ("bytearray(1 << 32)", {"oom"}),
    "mmap bomb": (_BYPASS + "m = imp('mmap').mmap(-1, 1 << 32)", {"oom", "error"}),
    "deep recursion": ("def f(n): return f(n + 1) + 1\nf(0)", {"error"}),
}


@pytest.mark.parametrize("name", list(_PY_BOMBS))
async def test_python_bombs_end_cleanly(name):
    source, statuses = _PY_BOMBS[name]
    result = await run_code(source, language="python", timeout=1.0)
    assert result.status in statuses, (result.status, result.error)
    await _still_works()


async def test_python_console_flood_is_capped():
    result = await run_code("while True: print('x' * 10000)", language="python", timeout=1.0)
    assert result.status == "timeout"
    flood = await run_code("for _ in range(1000): print('y' * 10000)\n1", language="python")
    assert flood.status == "ok" and flood.console_truncated and len(flood.console) == 64 * 1024
