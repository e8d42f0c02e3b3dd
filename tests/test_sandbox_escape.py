"""Hostile guests: each attempt ends in a clean error status and the runtime goes on.

The Python cases reach `os` and `importlib` through the classic
`object.__subclasses__()` walk, i.e. past the import allowlist, so what is
tested is the operating-system isolation, not the allowlist.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from orchestrator.sandbox import MEMORY_CEILING, run_code
from orchestrator.sandbox._isolation import landlock_abi
from orchestrator.sandbox.python import shutdown

_BYPASS = (
    "os_ = [c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__\n"
    "imp = os_['sys'].modules['importlib'].import_module\n"
)


@pytest.fixture(autouse=True)
async def _stop_fork_servers():
    yield
    await shutdown()


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    yield server
    server.close()


async def _still_works(language: str) -> None:
    source = "export default () => 6 * 7" if language == "javascript" else "6 * 7"
    result = await run_code(source, language=language)
    assert (result.status, result.value) == ("ok", 42)


# --- JavaScript ------------------------------------------------------------------

_JS_BOMBS = {
    "runaway loop": ("for (;;) {}", {"timeout"}),
    "array bomb": ("const a = []; for (;;) a.push({ x: a.length })", {"oom"}),
    "string bomb": ("const parts = []; for (;;) parts.push('x'.repeat(1 << 20) + parts.length)", {"oom"}),
    "string doubling": ("let s = 'x'; for (;;) s += s", {"oom", "error"}),
    "ArrayBuffer bomb": ("const b = []; for (;;) b.push(new ArrayBuffer(1 << 20))", {"oom"}),
    "typed array bomb": ("const b = []; for (;;) b.push(new Float64Array(1 << 22))", {"oom"}),
    "deep recursion": ("function f(n) { return f(n + 1) + 1 }\nf(0)", {"error"}),
    "catastrophic regex": ("/^(a+)+$/.test('a'.repeat(40) + 'b')", {"timeout"}),
    "never-settling promise": ("export default () => new Promise(() => {})", {"error", "timeout"}),
}


@pytest.mark.parametrize("name", list(_JS_BOMBS))
async def test_js_bombs_end_cleanly(name):
    source, statuses = _JS_BOMBS[name]
    # Memory bombs get time to reach the ceiling even on a loaded machine; loops are cut at 1 s.
    result = await run_code(source, timeout=1.0 if "timeout" in statuses else 20.0)
    assert result.status in statuses, (result.status, result.error)
    assert result.error
    if result.status == "oom":
        assert result.memory_used_bytes <= MEMORY_CEILING
    await _still_works("javascript")


async def test_js_deep_recursion_says_so():
    result = await run_code("function f() { return f() + 1 }\nexport default f", timeout=1.0)
    assert result.status == "error" and "call stack" in result.error


@pytest.mark.parametrize(
    "source",
    [
        "import x from '../../etc/passwd'; export default x",
        "import fs from 'fs'; export default fs.readFileSync('/etc/passwd', 'utf8')",
        "export default async () => (await import('node:child_process')).execSync('id')",
        "export default () => typeof require + typeof process + typeof fetch + typeof std + typeof os",
    ],
)
async def test_js_has_no_files_processes_or_network(source):
    result = await run_code(source, timeout=1.0)
    if result.status == "ok":  # the capability probe: nothing of the kind exists
        assert result.value == "undefined" * 5
    else:
        assert result.status == "error" and "module map" in result.error
    await _still_works("javascript")


async def test_js_cannot_reach_a_loopback_port(listener):
    port = listener.getsockname()[1]
    source = f"export default async () => await fetch('http://127.0.0.1:{port}/')"
    result = await run_code(source, timeout=1.0)
    assert result.status == "error" and "fetch" in result.error
    with pytest.raises(BlockingIOError):
        listener.accept()


# --- Python ---------------------------------------------------------------------

_PY_BOMBS = {
    "runaway loop": ("while True: pass", {"timeout"}),
    "array bomb": ("a = []\nwhile True: a.append([0] * 4096)", {"oom"}),
    "string bomb": ("s = 'x'\nwhile True: s += s", {"oom"}),
    "bytearray (ArrayBuffer) bomb": ("b = []\nwhile True: b.append(bytearray(1 << 20))", {"oom"}),
    "one huge allocation": ("bytearray(1 << 32)", {"oom"}),
    "deep recursion": ("def f(n): return f(n + 1) + 1\nf(0)", {"error"}),
}


@pytest.mark.parametrize("name", list(_PY_BOMBS))
async def test_python_bombs_end_cleanly(name):
    source, statuses = _PY_BOMBS[name]
    result = await run_code(source, language="python", timeout=1.0)
    assert result.status in statuses, (result.status, result.error)
    await _still_works("python")


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
    ],
)
async def test_python_cannot_spawn_or_signal(attempt):
    result = await run_code(_BYPASS + attempt, language="python")
    if result.status == "ok":  # os.system reports the failed spawn as exit status 127
        assert result.value == 127 << 8
    else:
        assert result.status == "error" and "PermissionError" in result.error, result.error
    assert not os.path.exists("/tmp/sandbox-escape")
    await _still_works("python")


async def test_python_import_outside_the_module_map_is_refused():
    modules = {"./helpers.py": "import os\n"}
    result = await run_code("import helpers", language="python", modules=modules)
    assert result.status == "error" and "'os' is not allowed" in result.error
    with pytest.raises(ValueError, match="modules"):
        run_code("1", language="python", modules={"../../etc/passwd.py": "x"})


async def test_python_child_runs_unprivileged_in_its_own_user_namespace():
    result = await run_code(_BYPASS + "os_['getuid']()", language="python")
    assert (result.status, result.value) == ("ok", 65534)  # unmapped: no privilege outside


def test_the_machine_provides_landlock():
    assert landlock_abi() >= 1  # the Python sandbox fails closed without it
