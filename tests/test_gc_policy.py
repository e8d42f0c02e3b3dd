"""`runtime.gc_defer_full`: full collections wait while executions run, and CPython's thresholds
come back when the last one ends (orchestrator/engine/gc_policy.py, docs/performance.md).

The collector's counts are process-wide, so what it does under allocation is measured in a fresh
subprocess with its import heap frozen; what an execution holds is checked in this process through
the thresholds a tool sees.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from support import Q, chat_definitions

from orchestrator import ToolResult, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.engine import gc_policy
from providers.scripted import ScriptedCall, ScriptedResponse

REPO = Path(__file__).resolve().parents[1]

_COUNT_FULL_COLLECTIONS = textwrap.dedent(
    """\
    import gc, json
    from orchestrator.engine import gc_policy

    gc.collect()
    gc.freeze()  # as the runtime does at open: the import heap is out of the count
    full = []
    gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2 and full.append(1))


    def full_collections(survivors, held):
        gc.collect()
        full.clear()
        if held:
            gc_policy.hold_full_collections()
        kept = [[] for _ in range(survivors)]  # objects that outlive two young collections, like a conversation's
        if held:
            gc_policy.release_full_collections()
        return len(full)


    print(json.dumps({
        "cpython": [full_collections(n, held=False) for n in (150_000, 1_000_000)],
        "held": [full_collections(n, held=True) for n in (150_000, 1_000_000)],
        "threshold": gc.get_threshold(),
    }))
    """
)


def test_a_full_collection_waits_ten_times_as_long_while_an_execution_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_FULL_COLLECTIONS], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    cpython, held = counts["cpython"], counts["held"]
    assert cpython[0] >= 1  # CPython's own thresholds pause for 150,000 survivors...
    assert held[0] == 0  # ...held, they do not
    assert held[1] >= 1  # a load that never ends still gets its cyclic garbage collected
    assert held[1] * 4 <= cpython[1]  # but several times less often
    assert counts["threshold"] == list(gc.get_threshold())  # given back when the last execution ended


def _threshold_probe(seen: list[tuple[int, int, int]]) -> Any:
    async def probe(state: Any, args: Q) -> ToolResult:
        seen.append(gc.get_threshold())
        return ToolResult.ok("probed")

    return chat_definitions({"probe": define_tool(description="Probe", args=Q, execute=probe)}, ("probe",))


def _probe_script() -> list[ScriptedResponse]:
    return [ScriptedResponse(tool_calls=[ScriptedCall("probe", {"q": ""})]), ScriptedResponse(text="Done.")]


async def test_an_execution_holds_full_collections_until_it_ends(make_runtime: Any) -> None:
    cpython = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    rt, _ = await make_runtime(_threshold_probe(seen), _probe_script())
    await (await rt.create_thread("chat")).send("hi")
    assert seen == [(cpython[0], cpython[1], cpython[2] * gc_policy.FACTOR)]
    assert gc.get_threshold() == cpython


async def test_a_host_can_leave_the_collector_alone(make_runtime: Any) -> None:
    cpython = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    settings = RuntimeSettings(gc_defer_full=False)
    rt, _ = await make_runtime(_threshold_probe(seen), _probe_script(), settings=settings)
    await (await rt.create_thread("chat")).send("hi")
    assert seen == [cpython]


async def test_a_cancelled_execution_gives_the_thresholds_back(make_runtime: Any) -> None:
    cpython = gc.get_threshold()
    started = asyncio.Event()

    async def hang(state: Any, args: Q) -> ToolResult:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    defs = chat_definitions({"hang": define_tool(description="Hang", args=Q, execute=hang)}, ("hang",))
    rt, _ = await make_runtime(defs, [ScriptedResponse(tool_calls=[ScriptedCall("hang", {"q": ""})])])
    send = asyncio.create_task((await rt.create_thread("chat")).send("hi"))
    await started.wait()
    assert gc.get_threshold() != cpython
    send.cancel()
    await asyncio.gather(send, return_exceptions=True)
    await rt.close()  # the execution runs on the runtime's task: closing ends it
    assert gc.get_threshold() == cpython


def test_thresholds_a_host_sets_meanwhile_are_its_own() -> None:
    cpython = gc.get_threshold()
    gc_policy.hold_full_collections()
    try:
        gc.set_threshold(1000, 20, 30)
    finally:
        gc_policy.release_full_collections()
    try:
        assert gc.get_threshold() == (1000, 20, 30)
    finally:
        gc.set_threshold(*cpython)
