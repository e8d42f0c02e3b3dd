"""Hostile JavaScript guests: each attack ends in a clean result and the host goes on.

The guest runs inside a WebAssembly instance with no WASI directories,
sockets or environment, and imports only from the in-memory module map.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from orchestrator.core.settings import SandboxSettings
from orchestrator.sandbox import MEMORY_CEILING, RESULT_LIMIT, configure, run_code
from orchestrator.sandbox.python import shutdown

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


# A native operation does not poll the interrupt handler: a naive search of a 64 Ki needle that
# never matches, in a 1 Mi haystack (about a minute of work). Before the epoch deadline, the run
# reported "timeout" after timeout + 2 s while its thread searched on, holding its budget share.
_NATIVE_SEARCH = "console.log('searching'); export default 'a'.repeat(1 << 20).indexOf('a'.repeat(1 << 16) + 'b')"


def _engine_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "sandbox-js")


async def _until(condition, within: float) -> bool:
    end = time.monotonic() + within
    while not condition():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.01)
    return True


@pytest.fixture
async def default_budget():
    configure(SandboxSettings())  # 4 JavaScript runs, 512 MiB: four stuck runs held all of it
    yield
    configure(SandboxSettings())
    await shutdown()  # the Python workers belong to this test's event loop


async def test_js_a_native_operation_stops_at_its_timeout_and_frees_the_budget(default_budget):
    await _still_works()  # the engine is compiled: the runs below reach their search well within 1 s
    started = time.monotonic()
    results = await asyncio.gather(*(run_code(_NATIVE_SEARCH, timeout=1.0) for _ in range(4)))
    for result in results:  # the engine's own answer (its console is there), not the host giving up on it
        assert (result.status, result.error, result.console) == ("timeout", "timed out", "searching\n")
    assert time.monotonic() - started < 2.0
    assert await _until(lambda: _engine_threads() == 0, 0.5)
    js = await run_code("export default 6 * 7", timeout=0.5)  # before: "timed out ... waiting for a sandbox"
    assert (js.status, js.value) == ("ok", 42), js.error
    py = await run_code("6 * 7", language="python", timeout=5.0)
    assert (py.status, py.value) == ("ok", 42), py.error


async def test_js_abort_inside_a_native_operation_ends_it_by_its_deadline(default_budget):
    await _still_works()
    execution = run_code(_NATIVE_SEARCH, timeout=1.0)
    await asyncio.sleep(0.3)
    started = time.monotonic()
    execution.abort("stop it")
    result = await execution
    assert (result.status, result.error) == ("aborted", "stop it")
    assert time.monotonic() - started < 1.5  # the engine ended at its deadline, before the host's 2 s grace
    assert await _until(lambda: _engine_threads() == 0, 0.5)


async def test_js_the_epoch_ticker_runs_only_while_runs_do():
    await _still_works()
    assert await _until(lambda: not any(t.name == "sandbox-epoch" for t in threading.enumerate()), 1.0)
    execution = run_code("for (;;) {}", timeout=5.0)
    assert await _until(lambda: any(t.name == "sandbox-epoch" for t in threading.enumerate()), 2.0)
    execution.abort()
    assert (await execution).status == "aborted"
    assert await _until(lambda: not any(t.name == "sandbox-epoch" for t in threading.enumerate()), 1.0)


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
