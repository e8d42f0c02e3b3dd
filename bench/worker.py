"""One contender in its own process, driven by `bench/run.py` over stdin/stdout.

Each line in is a JSON command, each line out its JSON answer. Separate
processes keep the frameworks' imports, caches and garbage collector apart, and
let `time.process_time()` be one contender's CPU alone. Commands:

    {"op": "conv", "scenario", "model", "repeat"}       wall/CPU per conversation
    {"op": "conv", ..., "stubbed": true}                 the same, runtime only, model replayed
    {"op": "load", "model", "concurrency", "total"}     throughput and step latency
    {"op": "mem_running", "model", "n"}                 RSS per in-flight conversation
    {"op": "mem_idle", "n"}                             RSS per idle thread (runtime)
    {"op": "progress", "model", "closing_at"}           closing delta -> tool_call_started
    {"op": "profile", "scenario", "model", "repeat", "path"}
    {"op": "freeze"}                                    gc.collect(); gc.freeze()
    {"op": "never_idle"}                                as if an execution ran here for good (gc_policy)
    {"op": "quit"}
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Replies own the real stdout; anything a framework prints (the runtime's step
# log, warnings) goes to stderr, which the driver saves to a log file.
_REPLIES = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

from bench.contenders import make  # noqa: E402


class _GCWatch:
    """Counts full (generation 2) collections and their pauses."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self.cpu: list[float] = []  # the collector's own CPU per pause (the wall pause adds waiting for a core)
        self._start = self._start_cpu = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start, self._start_cpu = time.perf_counter(), time.thread_time()
        else:
            self.pauses.append(time.perf_counter() - self._start)
            self.cpu.append(time.thread_time() - self._start_cpu)


def rss() -> int:
    """Resident set size in bytes (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Worker:
    def __init__(self, contender: Any) -> None:
        self.contender = contender
        self.gc = _GCWatch()

    async def conv(self, scenario: str, model: str, repeat: int, stubbed: bool = False) -> dict[str, Any]:
        """Wall and CPU per conversation; `stubbed`: the runtime with its model replayed (own cost only)."""
        run = self.contender.own_conversation if stubbed else self.contender.conversation
        walls, cpus, steps = [], [], 0
        for _ in range(repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            steps = await run(scenario, model)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        return {"wall": walls, "cpu": cpus, "steps": steps}

    async def load(self, model: str, concurrency: int, total: int) -> dict[str, Any]:
        """`total` one-step conversations, `concurrency` in flight at any time."""
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(total):
            queue.put_nowait(i)
        latencies: list[float] = []
        errors: list[str] = []

        async def lane(number: int) -> None:
            # Lanes start spread over one provider round trip: started together they
            # stay in lockstep, every lane's chunks landing at once, which no real
            # traffic does (and which would charge queueing to the framework).
            await asyncio.sleep(0.06 * number / concurrency)
            while not queue.empty():
                queue.get_nowait()
                start = time.perf_counter()
                try:
                    await self.contender.conversation("a", model)
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                latencies.append(time.perf_counter() - start)

        pauses_before = len(self.gc.pauses)
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(lane(n) for n in range(concurrency)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        pauses, pause_cpu = self.gc.pauses[pauses_before:], self.gc.cpu[pauses_before:]
        return {
            "wall": wall,
            "cpu": cpu,
            "latencies": latencies,
            "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "gc_full": len(pauses),
            "gc_max_pause": max(pauses, default=0.0),
            "gc_max_pause_cpu": max(pause_cpu, default=0.0),
            "gc_objects": len(gc.get_objects()),
        }

    async def mem_running(self, model: str, n: int, settle: float) -> dict[str, Any]:
        """RSS and Python-heap growth while `n` conversations wait on the provider."""
        gc.collect()
        base = rss()
        tracemalloc.start()
        tasks = [asyncio.create_task(self.contender.conversation("a", model)) for _ in range(n)]
        await asyncio.sleep(settle)  # every request is now waiting on the provider's latency
        during, heap = rss(), tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()  # tracing slows the rest of the run severalfold
        await asyncio.gather(*tasks)
        return {"per_conversation": (during - base) / n, "heap_per_conversation": heap / n, "base": base}

    async def mem_idle(self, n: int) -> dict[str, Any]:
        await self.contender.idle_threads(10)  # open storage, warm caches
        gc.collect()
        base = rss()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        handles = await self.contender.idle_threads(n)
        gc.collect()
        heap = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        after = rss()
        del handles
        return {"rss_per_thread": (after - base) / n, "heap_per_thread": heap / n}

    async def profile(self, scenario: str, model: str, repeat: int, path: str) -> dict[str, Any]:
        """pyinstrument's call tree (text and HTML), then cProfile's top functions by own time."""
        import cProfile
        import io
        import pstats

        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="enabled")
        with profiler:
            for _ in range(repeat):
                await self.contender.conversation(scenario, model)
        tree = profiler.output_text(unicode=False, color=False, show_all=False)
        Path(path).with_suffix(".html").write_text(profiler.output_html())
        cprofile = cProfile.Profile()
        cprofile.enable()
        for _ in range(repeat):
            await self.contender.conversation(scenario, model)
        cprofile.disable()
        flat = io.StringIO()
        pstats.Stats(cprofile, stream=flat).sort_stats("tottime").print_stats(25)
        text = f"{tree}\n\n# cProfile, {repeat} conversation(s), top 25 by own time\n{flat.getvalue()}"
        Path(path).write_text(text)
        return {"text": text}

    async def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.pop("op")
        if op == "freeze":
            gc.collect()
            gc.freeze()
            return {"frozen": gc.get_freeze_count()}
        if op == "never_idle":  # full collections stay deferred between waves of the load, as in a busy server
            from orchestrator.engine import gc_policy

            gc_policy.hold_full_collections()
            return {"threshold": gc.get_threshold()}
        if op == "progress":
            return await self.contender.progress(command["model"], command["closing_at"])
        return await getattr(self, op)(**command)


async def serve(key: str, base_url: str) -> None:
    contender = make(key, base_url)
    worker = Worker(contender)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    _reply({"ready": True, "name": contender.name, "pid": os.getpid()})
    while line := await reader.readline():
        command = json.loads(line)
        if command.get("op") == "quit":
            break
        try:
            _reply({"ok": True, **await worker.handle(command)})
        except Exception as exc:
            import traceback

            traceback.print_exc(file=sys.stderr)
            _reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})
    await contender.close()


def _reply(payload: dict[str, Any]) -> None:
    _REPLIES.write(json.dumps(payload) + "\n")
    _REPLIES.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description="One benchmark contender, driven over stdin/stdout.")
    parser.add_argument("contender")
    parser.add_argument("--base-url", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.contender, args.base_url))


if __name__ == "__main__":
    main()
