"""The process-wide sandbox budget: a flood of runs cannot hold more than the config allows.

Before it, JavaScript started one thread per call (30 concurrent runs held
2.9 GB) and the Python cap was a constant. What is observed here is what
really runs: live "sandbox-js" threads, and Monty worker processes running a
guest.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import yaml
from sandbox_support import running_workers

from orchestrator.core.settings import RuntimeSettings, SandboxSettings
from orchestrator.runtime import Runtime
from orchestrator.sandbox import MEMORY_CEILING, configure, run_code
from orchestrator.sandbox.python import shutdown

ROOT = Path(__file__).resolve().parents[2]
_JS_LOOP = "for (;;) {}"
_PY_LOOP = "while True: pass"


@pytest.fixture(autouse=True)
async def _default_budget_after():
    yield
    configure(SandboxSettings())
    await shutdown()


def _js_running() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "sandbox-js")


def _py_running() -> int:
    """Guests computing: Monty workers on the CPU (idle warm workers wait on their pipe)."""
    return len(running_workers())


async def _observe(count, expected: int, window: float = 0.5) -> int:
    """Wait (bounded) until `expected` runs are up, then watch a while: the most seen at once."""
    for _ in range(1000):
        if count() >= expected:
            break
        await asyncio.sleep(0.01)
    most = 0
    for _ in range(int(window / 0.02)):
        most = max(most, count())
        await asyncio.sleep(0.02)
    return most


async def _stop_all(executions) -> list:
    for execution in executions:
        execution.abort("test done")
    return await asyncio.wait_for(asyncio.gather(*executions), 20)


async def test_javascript_runs_at_once_are_capped():
    configure(SandboxSettings(max_javascript_runs=3, memory_budget_bytes=64 * MEMORY_CEILING))
    runs = [run_code(_JS_LOOP, timeout=60) for _ in range(10)]
    assert await _observe(_js_running, 3) == 3  # before: 10 threads, one per call
    assert not any(run.done() for run in runs)
    results = await _stop_all(runs)
    assert {result.status for result in results} == {"aborted"}
    assert (await run_code("export default 1")).value == 1  # every share came back


async def test_python_runs_at_once_are_capped():
    configure(SandboxSettings(max_python_runs=1, memory_budget_bytes=64 * MEMORY_CEILING))
    runs = [run_code(_PY_LOOP, language="python", timeout=60) for _ in range(3)]
    assert await _observe(_py_running, 1) == 1  # before: two at once, whatever the config
    results = await _stop_all(runs)
    assert {result.status for result in results} == {"aborted"}


async def test_the_memory_budget_caps_both_languages_together():
    configure(SandboxSettings(max_python_runs=8, max_javascript_runs=8, memory_budget_bytes=2 * MEMORY_CEILING))
    runs = [run_code(_JS_LOOP, timeout=60) for _ in range(3)]
    runs += [run_code(_PY_LOOP, language="python", timeout=60) for _ in range(2)]
    assert await _observe(lambda: _js_running() + _py_running(), 2) == 2
    await _stop_all(runs)


async def test_a_waiter_times_out_with_a_clear_error():
    configure(SandboxSettings(max_javascript_runs=1))
    holder = run_code(_JS_LOOP, timeout=60)
    await _observe(_js_running, 1, window=0)
    waiter = await run_code("export default 1", timeout=0.3)
    assert waiter.status == "timeout"
    assert "waiting for a sandbox" in waiter.error and "runtime.sandbox" in waiter.error
    assert "at most 1 javascript" in waiter.error
    assert waiter.duration_ms < 3000
    await _stop_all([holder])


async def test_waiting_counts_against_the_run_timeout_and_then_it_runs():
    configure(SandboxSettings(max_python_runs=1))
    holder = run_code(_PY_LOOP, language="python", timeout=0.5)
    waiter = run_code("6 * 7", language="python", timeout=20)
    assert (await holder).status == "timeout"
    result = await waiter
    assert (result.status, result.value) == ("ok", 42)


async def test_abort_while_waiting_returns_at_once():
    configure(SandboxSettings(max_javascript_runs=1))
    holder = run_code(_JS_LOOP, timeout=60)
    await _observe(_js_running, 1, window=0)
    waiter = run_code("export default 1", timeout=60)
    await asyncio.sleep(0.05)
    waiter.abort("changed my mind")
    result = await asyncio.wait_for(waiter, 2)
    assert (result.status, result.error) == ("aborted", "changed my mind")
    await _stop_all([holder])
    assert (await run_code("export default 2")).value == 2


async def test_a_cancelled_waiter_gives_its_place_back():
    configure(SandboxSettings(max_javascript_runs=1))
    holder = run_code(_JS_LOOP, timeout=60)
    await _observe(_js_running, 1, window=0)
    waiter = asyncio.ensure_future(run_code("export default 1", timeout=60))
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await _stop_all([holder])
    assert (await run_code("export default 3", timeout=5)).value == 3


def test_budget_settings_are_validated_naming_the_field():
    with pytest.raises(ValueError, match="sandbox.max_javascript_runs"):
        RuntimeSettings.model_validate({"sandbox": {"max_javascript_runs": 0}})
    with pytest.raises(ValueError, match="sandbox.memory_budget_bytes"):
        RuntimeSettings.model_validate({"sandbox": {"memory_budget_bytes": MEMORY_CEILING - 1}})
    with pytest.raises(ValueError, match="sandbox.max_runs"):
        RuntimeSettings.model_validate({"sandbox": {"max_runs": 3}})


async def test_the_yaml_runtime_section_sets_the_budget_on_open(tmp_path: Path):
    config = {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {"demo": {"provider": "scripted", "model": "demo"}},
        "default_model": "demo",
        "runtime": {"sandbox": {"max_javascript_runs": 2}, "gc_freeze": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    runtime = Runtime.from_path(ROOT / "agents", config=path, storage=f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert runtime.settings.sandbox.max_javascript_runs == 2
    async with runtime:
        runs = [run_code(_JS_LOOP, timeout=60) for _ in range(5)]
        assert await _observe(_js_running, 2) == 2
        await _stop_all(runs)
