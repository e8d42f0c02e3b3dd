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
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="warm executions per language")
    parser.add_argument("--one", choices=sorted(CASES), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print(json.dumps(asyncio.run(_measure(options.one, options.runs))))
        return
    print(f"| language | fresh (ms) | warm, median of {options.runs} (ms) | memory held (MiB) |")
    print("|---|---:|---:|---:|")
    for language in CASES:
        out = subprocess.run(
            [sys.executable, __file__, "--one", language, "--runs", str(options.runs)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {language} | {row['fresh_ms']:.1f} | {row['warm_ms']:.2f} | {row['held'] / 2**20:.1f} |")


if __name__ == "__main__":
    main()
