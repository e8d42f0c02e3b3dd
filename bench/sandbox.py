"""Cost of a sandboxed execution, fresh and warm, per language; prints a markdown table.

"Fresh" is the first execution in a new process: for JavaScript it includes
compiling the QuickJS wasm module (TypeScript also compiles the type-strip
transform), for Python starting the fork server. "Warm" is the median of the
executions after it: every execution still gets a new engine instance or a
new forked child, nothing is reused between runs. "Held" is the memory the
execution held: wasm linear memory for JavaScript, peak RSS of the child
(including the forked interpreter's pages) for Python.

Run: .venv/bin/python bench/sandbox.py [--runs N]; each language in its own
process so that "fresh" is really fresh.

``--flood N`` starts N runs at once that each fill ~100 MiB and prints what
the process held: the most runs seen at once (live engine threads for
JavaScript, guest processes for Python), the wall time and the process's
peak RSS (for Python, the fork servers' and guests' memory is outside it).
With the default ``runtime.sandbox`` budget, runs beyond it wait.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "javascript": ("export default () => [1, 2, 3].map((x) => x * 2).reduce((a, b) => a + b)", {}),
    "typescript": ("export default (): number => [1, 2, 3].reduce((a: number, b: number) => a + b)", {}),
    "python": ("sum(x * 2 for x in [1, 2, 3])", {}),
}


async def _measure(language: str, runs: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from orchestrator.sandbox import run_code
    from orchestrator.sandbox.python import shutdown

    source, options = CASES[language]
    timings, held = [], []
    for _ in range(runs + 1):
        started = time.perf_counter()
        result = await run_code(source, language=language, **options)
        timings.append((time.perf_counter() - started) * 1000)
        assert result.status == "ok", result.error
        held.append(result.memory_used_bytes or 0)
    await shutdown()
    return {"fresh_ms": timings[0], "warm_ms": statistics.median(timings[1:]), "held": max(held)}


_FILL = {
    "javascript": "export default () => { const b = new Uint8Array(100 * 2 ** 20); b.fill(1); return b[7] }",
    "python": "b = bytearray(100 * 2 ** 20)\nb[7] = 1\nb[7]",
}


async def _flood(language: str, runs: int) -> dict:
    import threading

    sys.path.insert(0, str(ROOT))
    from orchestrator.sandbox import run_code
    from orchestrator.sandbox.python import shutdown

    most, done = 0, False

    async def watch() -> None:
        nonlocal most
        while not done:
            if language == "javascript":
                now = sum(1 for t in threading.enumerate() if t.name == "sandbox-js")
            else:
                now = sum(len(_children(server)) for server in _children(os.getpid()))
            most = max(most, now)
            await asyncio.sleep(0.005)

    watcher = asyncio.ensure_future(watch())
    started = time.perf_counter()
    results = await asyncio.gather(*(run_code(_FILL[language], language=language, timeout=120) for _ in range(runs)))
    wall = time.perf_counter() - started
    done = True
    await watcher
    await shutdown()
    statuses = sorted({r.status for r in results})
    return {"most": most, "wall_s": wall, "peak_rss": _peak_rss(), "statuses": statuses}


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _flood_table(runs: int) -> None:
    print("| language | runs started at once | most running at once | wall (s) | process peak RSS (MiB) | statuses |")
    print("|---|---:|---:|---:|---:|---|")
    for language in _FILL:
        out = subprocess.run(
            [sys.executable, __file__, "--one-flood", language, "--flood", str(runs)],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {language} | {runs} | {row['most']} | {row['wall_s']:.1f} | {row['peak_rss'] / 2**20:.0f} "
            f"| {', '.join(row['statuses'])} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="warm executions per language")
    parser.add_argument("--one", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--flood", type=int, help="start this many ~100 MiB runs at once per language")
    parser.add_argument("--one-flood", choices=sorted(_FILL), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one_flood:
        print(json.dumps(asyncio.run(_flood(options.one_flood, options.flood))))
        return
    if options.flood:
        _flood_table(options.flood)
        return
    if options.one:
        print(json.dumps(asyncio.run(_measure(options.one, options.runs))))
        return
    print(f"| language | fresh (ms) | warm, median of {options.runs} (ms) | memory held (MiB) |")
    print("|---|---:|---:|---:|")
    for language in CASES:
        out = subprocess.run(
            [sys.executable, __file__, "--one", language, "--runs", str(options.runs)],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {language} | {row['fresh_ms']:.1f} | {row['warm_ms']:.2f} | {row['held'] / 2**20:.1f} |")


if __name__ == "__main__":
    main()
