"""How much of the `stream: litellm` path's cost over a bare LiteLLM loop is the storage hand-off.

    .venv/bin/python bench/handoff.py [rounds] [litellm|auto]

Scenario b, four contenders in this one process against one fake provider, interleaved rounds
of three conversations each: the bare `acompletion` loop, and the runtime with `stream: litellm`
making its SQLite calls (a) through `run_in_executor` on a one-worker pool, as before
`storage/_thread.py`, (b) always through the storage's own thread (until the eleventh session),
(c) as shipped: at once on the loop's thread when the storage thread is idle, else through it,
(d) always inline on the event loop, an experiment only (a lock held by another process would
block the loop). First, the
latency of one call alone (`get_thread`, 2,000 in a row, each way twice). Ratios to the
bare loop are paired per round, then the median: this machine's runs drift by more than the
differences measured. The contenders run in a fresh random order every round (`bench/gap.py`).
The storage's private `_run` is swapped per contender turn.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.contenders import make
from bench.fake_provider import model_name
from bench.gap import interleaved, print_ratios
from bench.run import fake_server
from orchestrator.storage import sqlite

_SHIPPED = sqlite.SQLiteStorage._run
_POOL = ThreadPoolExecutor(max_workers=1)


async def _executor(self: Any, fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(fn, self._conn, *args))


async def _inline(self: Any, fn: Any, *args: Any) -> Any:
    return fn(self._conn, *args)


def _thread_always(self: Any, fn: Any, *args: Any) -> Any:
    return self._thread.call(self._on_worker, fn, *args)


_WAYS = {
    "run_in_executor (before)": _executor,
    "own thread, always": _thread_always,
    "inline when the thread is idle (shipped)": _SHIPPED,
    "inline, always (experiment)": _inline,
}


async def _measure(url: str, rounds: int, stream: str) -> None:
    key = "runtime_litellm" if stream == "litellm" else "runtime"
    contenders = {"bare litellm loop": make("litellm", url)} | {way: make(key, url) for way in _WAYS}

    def swap(key: str) -> None:
        sqlite.SQLiteStorage._run = _WAYS.get(key, _SHIPPED)  # type: ignore[method-assign]

    times = await interleaved(contenders, "b", model_name("b", chunks=50), rounds, before=swap)
    sqlite.SQLiteStorage._run = _SHIPPED  # type: ignore[method-assign]
    reader = "LiteLLM's stream" if stream == "litellm" else "the OpenAI wire reader"
    print(f"scenario b, stream: {stream} ({reader}), {rounds} rounds; paired median ratio to the bare loop")
    print_ratios(times, "bare litellm loop", "SQLite calls")
    for contender in contenders.values():
        await contender.close()


async def _call_latency() -> None:
    import tempfile

    from orchestrator.core.messages import ThreadRecord

    with tempfile.TemporaryDirectory() as folder:
        async with sqlite.SQLiteStorage(f"{folder}/latency.db") as storage:
            thread = await storage.create_thread(ThreadRecord(agent_id="bench"))
            print("| one `get_thread` call alone | us per call |\n|---|---:|")
            for key in (
                "run_in_executor (before)",
                "own thread, always",
                "inline when the thread is idle (shipped)",
            ) * 2:
                sqlite.SQLiteStorage._run = _WAYS[key]  # type: ignore[method-assign]
                start = time.perf_counter()
                for _ in range(2000):
                    await storage.get_thread(thread.id)
                print(f"| {key} | {(time.perf_counter() - start) / 2000 * 1e6:.0f} |")
            sqlite.SQLiteStorage._run = _SHIPPED  # type: ignore[method-assign]
    print()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    stream = sys.argv[2] if len(sys.argv) > 2 else "litellm"
    asyncio.run(_call_latency())
    with fake_server() as url:
        asyncio.run(_measure(url, rounds, stream))


if __name__ == "__main__":
    main()
