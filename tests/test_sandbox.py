"""run_code: each option, both languages where it applies, abort and reporting."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_support import running_workers, until

from orchestrator.sandbox import MEMORY_CEILING, CodeExecution, CodeResult, run_code
from orchestrator.sandbox.python import shutdown


@pytest.fixture(autouse=True)
async def _stop_workers():
    yield
    await shutdown()


async def _ok(execution: CodeExecution) -> CodeResult:
    result = await execution
    assert result.status == "ok", (result.error, result.stack)
    return result


# --- execute ---------------------------------------------------------------


async def test_js_default_export_function_is_called():
    result = await _ok(run_code("export default function () { return 40 + 2 }"))
    assert result.value == 42
    assert result.duration_ms > 0


async def test_js_default_export_value_is_the_result():
    assert (await _ok(run_code("export default { a: [1, 'x', null] }"))).value == {"a": [1, "x", None]}


async def test_js_named_export_with_args():
    source = "export function add_one(x) { return x + 1 }\nexport default () => 0"
    result = await _ok(run_code(source, execute={"fn": "add_one", "args": [100]}))
    assert result.value == 101


async def test_js_async_export_is_awaited():
    source = "export async function later(x) { await null; return x * 3 }"
    assert (await _ok(run_code(source, execute={"fn": "later", "args": [5]}))).value == 15


async def test_js_missing_export_is_an_error_result():
    result = await run_code("export const x = 1", execute={"fn": "nope", "args": []})
    assert result.status == "error" and "nope" in result.error


async def test_js_guest_error_carries_the_guest_stack():
    result = await run_code("function inner() { throw new TypeError('bad input') }\nexport default () => inner()")
    assert result.status == "error"
    assert result.error == "TypeError: bad input"
    assert "inner" in result.stack and "/main.js" in result.stack


async def test_python_function_with_args():
    source = "def add_one(x):\n    return x + 1\n"
    result = await _ok(run_code(source, language="python", execute={"fn": "add_one", "args": [100]}))
    assert result.value == 101


async def test_python_last_expression_or_default_function():
    assert (await _ok(run_code("x = 6\nx * 7", language="python"))).value == 42
    assert (await _ok(run_code("def default():\n    return 'd'", language="python"))).value == "d"


async def test_python_guest_error_has_traceback():
    result = await run_code("def f():\n    raise KeyError('k')\nf()", language="python")
    assert result.status == "error" and result.error == "KeyError: 'k'"
    assert 'File "/main.py", line 2, in f' in result.stack


async def test_non_json_return_is_an_error():
    js = await run_code("export default () => 10n")
    py = await run_code("{1, 2}", language="python")
    assert js.status == "error" and "BigInt" in js.error
    assert py.status == "error" and "JSON" in py.error


async def test_bad_execute_shape_raises_naming_the_option():
    with pytest.raises(ValueError, match="execute"):
        run_code("1", execute={"function": "x"})
    with pytest.raises(ValueError, match="execute.args"):
        run_code("1", execute={"fn": "x", "args": "nope"})
    with pytest.raises(ValueError, match="execute.fn"):
        run_code("1", execute={"fn": "a.b", "args": []})


# --- modules ---------------------------------------------------------------


async def test_js_modules_import_each_other():
    modules = {
        "./math.js": "export const add = (a, b) => a + b",
        "./lib/twice.js": "import { add } from '../math.js'; export const twice = (x) => add(x, x)",
    }
    source = "import { twice } from './lib/twice.js'; export default () => twice(21)"
    assert (await _ok(run_code(source, modules=modules))).value == 42


async def test_js_import_outside_the_map_is_refused():
    for spec in ("../../etc/passwd", "fs", "/etc/passwd", "./missing.js"):
        result = await run_code(f"import x from '{spec}'; export default x")
        assert result.status == "error" and "module map" in result.error, spec


async def test_python_modules_are_importable():
    modules = {"./helpers.py": "def add(a, b):\n    return a + b\n"}
    result = await _ok(run_code("import helpers\nhelpers.add(2, 3)", language="python", modules=modules))
    assert result.value == 5


def test_module_paths_escaping_the_map_raise():
    for key in ("../../etc/passwd", "./a/../../b.js", "fs", "/abs.js"):
        with pytest.raises(ValueError, match="modules"):
            run_code("1", modules={key: "x"})


# --- imports -----------------------------------------------------------------


async def test_js_console_is_captured_when_imported():
    result = await _ok(run_code("export default () => { console.log('a', {b: 1}); console.error('e'); return 1 }"))
    assert result.console == 'a {"b":1}\n[error] e\n'


async def test_js_without_console_import_has_no_console():
    result = await run_code("export default () => typeof console", imports=[])
    assert result.value == "undefined"


async def test_python_imports_narrow_the_allowlist():
    ok = await _ok(run_code("import math\nmath.floor(2.5)", language="python", imports=["math"]))
    assert ok.value == 2
    refused = await run_code("import json\n1", language="python", imports=["math"])
    assert refused.status == "error" and "'json' is not allowed" in refused.error


async def test_python_stdout_is_captured_and_capped():
    result = await _ok(run_code("print('x' * 100000)\n1", language="python"))
    assert result.console_truncated and len(result.console) == 64 * 1024


def test_imports_outside_the_allowlist_raise():
    with pytest.raises(ValueError, match="imports"):
        run_code("1", imports=["fetch"])
    with pytest.raises(ValueError, match="imports"):
        run_code("1", language="python", imports=["os"])


# --- globals -----------------------------------------------------------------


async def test_globals_are_injected_in_both_languages():
    data = {"rows": [{"n": 1}, {"n": 2}], "scale": 10}
    js = await _ok(run_code("export default () => rows.map(r => r.n * scale)", globals=data))
    py = await _ok(run_code("[r['n'] * scale for r in rows]", language="python", globals=data))
    assert js.value == py.value == [10, 20]


def test_non_json_globals_raise():
    with pytest.raises(ValueError, match="globals"):
        run_code("1", globals={"x": object()})
    with pytest.raises(ValueError, match="globals"):
        run_code("1", globals={"not an identifier": 1})


# --- language and filename ----------------------------------------------------


async def test_ts_filename_means_typescript():
    source = "enum Mode { A = 2 }\nexport default (x: number): number => x * Mode.A"
    result = await _ok(run_code(source, filename="main.ts", execute={"fn": "default", "args": [21]}, report=True))
    assert result.value == 42
    assert result.report["language"] == "typescript"


async def test_typescript_language_and_ts_modules():
    modules = {"./util.ts": "export const greet = (n: string): string => `hi ${n}`"}
    result = await _ok(
        run_code(
            "import { greet } from './util.ts'; export default () => greet('ts')",
            language="typescript",
            modules=modules,
        )
    )
    assert result.value == "hi ts"


def test_unknown_language_raises():
    with pytest.raises(ValueError, match="language"):
        run_code("1", language="ruby")
    with pytest.raises(ValueError, match="filename"):
        run_code("1", filename="../x.js")


# --- memory limit and report ---------------------------------------------------


@pytest.mark.parametrize("asked", [1024, 10 * MEMORY_CEILING])
async def test_memory_limit_cannot_move_the_ceiling(asked):
    result = await _ok(run_code("export default 1", memory_limit_bytes=asked, report=True))
    assert result.report["memory_limit_bytes_requested"] == asked
    assert result.report["memory_limit_bytes_applied"] == MEMORY_CEILING
    assert result.report["memory_limit_clamped"] is (asked > MEMORY_CEILING)
    assert result.memory_used_bytes and result.memory_used_bytes < MEMORY_CEILING


async def test_python_report_and_memory():
    result = await _ok(run_code("1", language="python", report=True, memory_limit_bytes=MEMORY_CEILING * 2))
    assert result.report["memory_limit_bytes_applied"] == MEMORY_CEILING
    assert result.report["memory_limit_clamped"] is True
    assert "Monty" in result.report["engine"] and "bubblewrap" in result.report["engine"]


async def test_no_report_unless_asked():
    assert (await _ok(run_code("export default 1"))).report is None


def test_bad_memory_limit_raises():
    with pytest.raises(ValueError, match="memory_limit_bytes"):
        run_code("1", memory_limit_bytes=-5)


# --- abort ---------------------------------------------------------------------


class _Signal:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    def fire(self, reason: str) -> None:
        self.reason = reason
        self._event.set()


@pytest.mark.parametrize(("language", "source"), [("javascript", "while (true) {}"), ("python", "while True: pass")])
async def test_abort_stops_a_running_execution(language, source):
    execution = run_code(source, language=language, timeout=20)
    await asyncio.sleep(0.3)
    assert not execution.done()
    execution.abort("user stop")
    result = await asyncio.wait_for(execution, 5)
    assert result.status == "aborted" and result.error in ("user stop", "aborted")
    assert result.duration_ms < 5000


@pytest.mark.parametrize(("language", "source"), [("javascript", "while (true) {}"), ("python", "while True: pass")])
async def test_thread_abort_signal_aborts(language, source):
    signal = _Signal()
    execution = run_code(source, language=language, timeout=20, abort_signal=signal)
    await asyncio.sleep(0.3)
    signal.fire("thread stopped")
    result = await asyncio.wait_for(execution, 5)
    assert result.status == "aborted"


async def test_a_cancelled_python_run_leaves_no_worker_computing():
    """A stopped tool cancels its run: the worker running the guest is killed, not left spinning."""
    running = asyncio.ensure_future(run_code("while True: pass", language="python", timeout=30))
    assert await until(lambda: bool(running_workers()))
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert await until(lambda: not running_workers())


async def test_python_modules_keep_their_names_apart_and_their_lines():
    modules = {
        "./rates.py": "RATE = 2\n\ndef scaled(x):\n    return x * RATE\n",
        "./report.py": 'from rates import scaled\nRATE = \'not the same\'\nNOTE = """two\nlines"""\n'
        "def boom():\n    raise ValueError(NOTE)\n",
    }
    ok = await _ok(
        run_code(
            "import rates, report\n[report.scaled(3), report.RATE, rates.RATE]", language="python", modules=modules
        )
    )
    assert ok.value == [6, "not the same", 2]
    failed = await run_code("import report\nreport.boom()", language="python", modules=modules)
    assert failed.status == "error" and failed.error == "ValueError: two\nlines"
    assert 'File "/report.py", line 6, in boom' in failed.stack and 'File "/main.py", line 2' in failed.stack


async def test_python_modules_that_import_each_other_in_a_cycle_are_an_error():
    modules = {"./a.py": "import b\n", "./b.py": "import a\n"}
    result = await run_code("import a", language="python", modules=modules)
    assert result.status == "error" and "cycle: a -> b -> a" in result.error


async def test_python_outside_the_engine_s_subset_says_so():
    result = await run_code("def g():\n    yield 1\nlist(g())", language="python")
    assert result.status == "error" and "subset of Python" in result.error


async def test_already_aborted_signal_never_runs():
    signal = _Signal()
    signal.fire("early")
    result = await run_code("1", language="python", abort_signal=signal)
    assert result.status == "aborted"


async def test_executions_run_concurrently_and_do_not_share_state():
    js = [run_code("globalThis.n = (globalThis.n || 0) + 1; export default globalThis.n") for _ in range(3)]
    counter = "try:\n    n += 1\nexcept NameError:\n    n = 1\nn"
    py = [run_code(counter, language="python") for _ in range(3)]
    results = await asyncio.gather(*js, *py)
    assert [r.value for r in results] == [1, 1, 1, 1, 1, 1]


async def test_abort_after_completion_is_harmless():
    execution = run_code("1 + 1", language="python")
    assert (await execution).value == 2
    execution.abort()
    assert (await _ok(run_code("2 + 2", language="python"))).value == 4


# --- the calculate tool ----------------------------------------------------------


class _FakeState:
    """Only what the tool uses: run_code, delegating to the real sandbox."""

    execution = None

    def run_code(self, source: str, **options):
        return run_code(source, **options)


def _load_calculate():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "agents" / "tools" / "calculate.py"
    spec = importlib.util.spec_from_file_location("_calculate_tool", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the postponed annotations through it
    spec.loader.exec_module(module)
    return module


async def _calculate(**args):
    module = _load_calculate()
    return await module.tool.execute(_FakeState(), module.Args(**args))


async def test_calculate_returns_the_value_as_json():
    js = await _calculate(code="export default [1, 2, 3].map((x) => x * x)")
    py = await _calculate(code="sorted(rows)[len(rows) // 2]", language="python", data_json='{"rows": [3, 1, 2]}')
    assert (js.status, js.result) == ("success", "[1, 4, 9]")
    assert (py.status, py.result) == ("success", "2")


async def test_calculate_reports_the_guest_error_and_output():
    result = await _calculate(code="console.log('step 1'); export default () => { throw new RangeError('nope') }")
    assert result.status == "error"
    assert result.error.startswith("error: RangeError: nope") and "step 1" in result.error
    assert "/main.js" in result.stack


async def test_calculate_refuses_bad_data():
    result = await _calculate(code="1", data_json="[1]")
    assert result.status == "error" and "data_json" in result.error
