"""Hostile JavaScript guests: each attack ends in a clean result and the host goes on.

The guest runs inside a WebAssembly instance with no WASI directories,
sockets or environment, and imports only from the in-memory module map.
"""

from __future__ import annotations

import json
import socket

import pytest

from orchestrator.sandbox import MEMORY_CEILING, RESULT_LIMIT, run_code

_SECRET_NAME = "ORCH_SANDBOX_TEST_API_KEY"
_SECRET = "sk-sandbox-js-5e1b7c9d2f4a8e60"


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    yield server
    server.close()


async def _still_works() -> None:
    result = await run_code("export default () => 6 * 7")
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
    await _still_works()


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
    await _still_works()


async def test_js_cannot_reach_a_loopback_port(listener):
    port = listener.getsockname()[1]
    source = f"export default async () => await fetch('http://127.0.0.1:{port}/')"
    result = await run_code(source, timeout=1.0)
    assert result.status == "error" and "fetch" in result.error
    with pytest.raises(BlockingIOError):
        listener.accept()


# --- the host's environment and output size ------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "export default () => typeof process === 'undefined' ? 'none' : JSON.stringify(process.env)",
        "import * as std from 'qjs:std'; export default () => JSON.stringify(std.getenviron())",
        "import * as std from 'std'; export default () => std.getenv('" + _SECRET_NAME + "')",
        "import * as os from 'qjs:os'; export default () => os.readdir('/proc/self')",
        "export default () => JSON.stringify(Object.getOwnPropertyNames(globalThis))",
    ],
)
async def test_js_cannot_read_the_host_environment(source, monkeypatch):
    monkeypatch.setenv(_SECRET_NAME, _SECRET)
    result = await run_code(source, timeout=2.0)
    text = json.dumps(result.model_dump(mode="json"))
    assert _SECRET not in text and _SECRET_NAME not in text.replace(source, "")
    if result.status == "error":
        assert "module map" in result.error, result.error


async def test_js_huge_result_is_an_error_not_a_host_allocation():
    source = f"export default () => 'x'.repeat({RESULT_LIMIT + 1})"
    result = await run_code(source, timeout=20.0)
    assert result.status == "error" and str(RESULT_LIMIT) in result.error


async def test_js_console_flood_is_capped():
    source = "for (let i = 0; i < 1000; i++) console.log('y'.repeat(10000)); export default 1"
    flood = await run_code(source, timeout=20.0)
    assert flood.status == "ok" and flood.console_truncated and len(flood.console) <= 64 * 1024
