"""Startup benchmark: how long until a person sees something. Prints a markdown table.

    .venv/bin/python bench/startup.py            # 5 runs of each row, medians
    .venv/bin/python bench/startup.py --runs 9

Rows, each a fresh process from the repository root (wall clock from spawn):
- `orchestrator run support_demo` on a machine where it never ran (the request memo empty);
- `orchestrator --help`;
- `import litellm` alone (what the first model request needs);
- `orchestrator run support_demo`: its first conversation line (`[A · ...`) and its end;
- `orchestrator run support_chat --model test -m Hi`: the same on the offline model.

Target (issue 17): the demo's first conversation line within 1.5 s, median of 5.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _first_line_and_end(command: list[str], marker: str, cache: str) -> tuple[float, float]:
    """Seconds from spawn to the first stdout line starting with `marker`, and to exit."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "200", "XDG_CACHE_HOME": cache}
    start = time.perf_counter()
    first = float("nan")
    with subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if first != first and line.startswith(marker):  # nan: not seen yet
                first = time.perf_counter() - start
        proc.wait()
    end = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {proc.returncode}")
    return first, end


def _median(samples: list[float]) -> str:
    return f"{statistics.median(samples):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    orchestrator = str(BIN / "orchestrator")
    with tempfile.TemporaryDirectory() as tmp:
        demo = [orchestrator, "run", "support_demo"]
        rows = [
            ("orchestrator --help", [orchestrator, "--help"], "Usage"),
            ("python -c 'import litellm'", [sys.executable, "-c", "import litellm; print('done')"], "done"),
            ("orchestrator run support_demo", demo, "[A"),
            (
                "orchestrator run support_chat --model test -m Hi",
                [orchestrator, "run", "support_chat", "--model", "test", "-m", "Hi", "--db", f"{tmp}/s.db"],
                "[B",
            ),
        ]
        print(f"Startup, median of {runs} runs (s), {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n")
        print("| command | first line | exit |")
        print("|---|---:|---:|")
        cold = [_first_line_and_end(demo, "[A", f"{tmp}/cold{i}") for i in range(runs)]
        print(
            f"| `orchestrator run support_demo`, first run on the machine (empty request memo) "
            f"| {_median([s[0] for s in cold])} | {_median([s[1] for s in cold])} |",
            flush=True,
        )
        warm: list[float] = []
        for label, command, marker in rows:
            samples = [_first_line_and_end(command, marker, f"{tmp}/cache") for _ in range(runs + 1)][1:]
            warm += [s[0] for s in samples] if command is demo else []
            print(
                f"| `{label}` | {_median([s[0] for s in samples])} | {_median([s[1] for s in samples])} |", flush=True
            )
        verdict = "PASS" if statistics.median(warm) <= 1.5 else "FAIL"
        print(f"\nTarget: the demo's first conversation line within 1.5 s (median of {runs}): {verdict}")
        print("(each row after a first run that fills the request memo, providers/request_memo.py; the first")
        print("row has an empty memo each time, so the first request waits for `import litellm`)")


if __name__ == "__main__":
    main()
