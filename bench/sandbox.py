"""Cost of a sandboxed execution per engine, cold and warm, and a flood of runs; prints markdown tables.

"Cold" is the first execution in a new process: for JavaScript it includes
compiling the QuickJS wasm module (TypeScript also its type-strip transform),
for Python starting the Monty worker pool (and checking the bubblewrap jail).
"Warm" is the median of the executions after it: every execution still gets a
new engine instance (JavaScript) or a new worker process (Python); nothing of
a run is reused by the next.

``--flood N`` (default 30) starts N runs at once that each fill ~100 MiB and
reports the most seen running at once (engine threads for JavaScript, workers
on the CPU for Python), the wall time, and the peak memory the guests held
(the process's RSS growth for JavaScript, the sum of the workers' RSS for
Python), against ``runtime.sandbox.memory_budget_bytes``.

Targets (issue #43, for the Python engine): cold <= 150 ms, warm <= 10 ms, and
the 30-run flood within the memory budget with every run ending ok. JavaScript
rows are measured beside them for reference: their flood row has the same
target, their speed rows none (a cold run compiles QuickJS's wasm module).

Run: .venv/bin/python bench/sandbox.py [--runs N] [--flood N]; each engine is
measured in a process of its own, so that "cold" is really cold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLD_MS, WARM_MS = 150.0, 10.0
ENGINES = {  # row name -> (language, python_jail)
    "javascript (QuickJS on wasmtime)": ("javascript", "bwrap"),
    "typescript (QuickJS on wasmtime)": ("typescript", "bwrap"),
    "python (Monty, bubblewrap jail)": ("python", "bwrap"),
    "python (Monty, no jail)": ("python", "none"),
}
CASES = {
    "javascript": "export default () => [1, 2, 3].map((x) => x * 2).reduce((a, b) => a + b)",
    "typescript": "export default (): number => [1, 2, 3].reduce((a: number, b: number) => a + b)",
    "python": "sum([x * 2 for x in [1, 2, 3]])",
}
_FILL = {
    "javascript": "export default () => { const b = new Uint8Array(100 * 2 ** 20); b.fill(1); return b[7] }",
    "python": "b = 'x' * (100 * 2 ** 20)\nlen(b)",
}


def _configure(jail: str) -> None:
    sys.path.insert(0, str(ROOT))
    from orchestrator.core.settings import SandboxSettings
    from orchestrator.sandbox import configure

    configure(SandboxSettings(python_jail=jail))  # type: ignore[arg-type]


async def _measure(language: str, jail: str, runs: int) -> dict:
    _configure(jail)
    from orchestrator.sandbox import run_code
    from orchestrator.sandbox.python import shutdown

    timings = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        result = await run_code(CASES[language], language=language)
        timings.append((time.perf_counter() - started) * 1000)
        assert result.status == "ok", result.error
    await shutdown()
    return {"cold_ms": timings[0], "warm_ms": statistics.median(timings[1:])}


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


async def _flood(language: str, jail: str, runs: int) -> dict:
    _configure(jail)
    from orchestrator.sandbox import current_settings, run_code
    from orchestrator.sandbox.python import shutdown

    sys.path.insert(0, str(ROOT / "tests"))
    from sandbox_support import running_workers, workers

    await run_code(CASES[language], language=language)  # engine loaded, pool up: measure the guests only
    baseline = _rss(os.getpid())
    most = held = 0
    done = False

    async def watch() -> None:
        nonlocal most, held
        while not done:
            if language == "javascript":
                now = sum(1 for t in threading.enumerate() if t.name == "sandbox-js")
                memory = max(_rss(os.getpid()) - baseline, 0)
            else:
                now = len(running_workers())
                memory = sum(_rss(pid) for pid in workers())
            most, held = max(most, now), max(held, memory)
            await asyncio.sleep(0.005)

    watcher = asyncio.ensure_future(watch())
    started = time.perf_counter()
    results = await asyncio.gather(*(run_code(_FILL[language], language=language, timeout=120) for _ in range(runs)))
    wall = time.perf_counter() - started
    done = True
    await watcher
    await shutdown()
    statuses = sorted({r.status for r in results})
    budget = current_settings().memory_budget_bytes
    return {"most": most, "wall_s": wall, "held": held, "budget": budget, "statuses": statuses}


def _child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _speed_table(runs: int) -> None:
    print(f"| engine | cold (ms) | warm, median of {runs} (ms) | target | verdict |")
    print("|---|---:|---:|---|---|")
    for name, (language, jail) in ENGINES.items():
        row = _child("--one", language, "--jail", jail, "--runs", str(runs))
        if language == "python":
            ok = row["cold_ms"] <= COLD_MS and row["warm_ms"] <= WARM_MS
            target, verdict = f"cold <= {COLD_MS:.0f}, warm <= {WARM_MS:.0f}", _verdict(ok)
        else:
            target, verdict = "none (reference)", "-"
        print(f"| {name} | {row['cold_ms']:.1f} | {row['warm_ms']:.2f} | {target} | {verdict} |")


def _flood_table(runs: int) -> None:
    print(
        "\n| engine | runs at once | most running | wall (s) | guests' peak memory (MiB) | budget (MiB) | statuses "
        "| verdict |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for name, (language, jail) in ENGINES.items():
        if language not in _FILL:
            continue
        row = _child("--one-flood", language, "--jail", jail, "--flood", str(runs))
        ok = row["held"] <= row["budget"] and row["statuses"] == ["ok"]
        print(
            f"| {name} | {runs} | {row['most']} | {row['wall_s']:.1f} | {row['held'] / 2**20:.0f} "
            f"| {row['budget'] / 2**20:.0f} | {', '.join(row['statuses'])} | {_verdict(ok)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="warm executions per engine")
    parser.add_argument("--flood", type=int, default=30, help="~100 MiB runs started at once per engine")
    parser.add_argument("--one", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--one-flood", choices=sorted(_FILL), help=argparse.SUPPRESS)
    parser.add_argument("--jail", default="bwrap", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one_flood:
        print(json.dumps(asyncio.run(_flood(options.one_flood, options.jail, options.flood))))
    elif options.one:
        print(json.dumps(asyncio.run(_measure(options.one, options.jail, options.runs))))
    else:
        _speed_table(options.runs)
        _flood_table(options.flood)


if __name__ == "__main__":
    main()
