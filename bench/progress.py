"""Micro-benchmark: progress-argument detection must cost time linear in the arguments.

Run: .venv/bin/python bench/progress.py

Prints a markdown table: one 1 MB progress argument vs ten 100 KB ones, all in
10-byte deltas through `StreamAssembler` (the executor's path), and for contrast
the naive approach of re-parsing the buffer with a partial-JSON parser (jiter,
already installed as a dependency of openai; bench-only here) on every delta,
which is quadratic. Exits 1 if the 1 MB / 10 x 100 KB ratio is outside 2x.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.engine.streaming import ProgressScanner, StreamAssembler
from providers.stream import ToolCallDelta

DELTA = 10
REPEATS = 3
_PARAGRAPH = 'Plain prose for a while, then a "quoted" bit, a back\\slash, a new\nline, café, 😀. ' * 3


def _value(size: int) -> str:
    return (_PARAGRAPH * (size // len(_PARAGRAPH) + 1))[:size]


def _arguments(size: int) -> str:
    """A call's arguments whose `query` string is about `size` characters of JSON text."""
    return json.dumps({"query": _value(size), "limit": 10}, ensure_ascii=False)


def _deltas(calls: list[str]) -> list[ToolCallDelta]:
    out = []
    for index, args in enumerate(calls):
        out.append(ToolCallDelta(index, f"call_{index}", "search", ""))
        out.extend(ToolCallDelta(index, None, None, args[i : i + DELTA]) for i in range(0, len(args), DELTA))
    return out


def _best(run: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _assemble(deltas: list[ToolCallDelta], expected: list[str]) -> None:
    asm = StreamAssembler(lambda name: "query")
    values = [ev.progress_value for d in deltas for ev in asm.feed(d)]
    assert values == expected, "the scanner returned a wrong value"


def _scanner_only(fragments: list[str]) -> None:
    scanner = ProgressScanner("query")
    for f in fragments:
        if scanner.feed(f) is not None:
            return


def _jiter_reparse(fragments: list[str]) -> None:
    """What we avoid: re-parse everything so far on every delta until the value is complete."""
    import jiter

    buffer = ""
    for f in fragments:
        buffer += f
        parsed = jiter.from_json(buffer.encode(), partial_mode="on")  # drops unfinished strings
        if isinstance(parsed, dict) and isinstance(parsed.get("query"), str):
            return


def _row(case: str, size: int, deltas: int, seconds: float) -> str:
    per_delta = seconds / deltas * 1e6
    return f"| {case} | {size / 1e3:,.0f}k chars | {deltas:,} | {seconds * 1e3:,.1f} ms | {per_delta:.2f} µs |"


def main() -> int:
    big = _arguments(1_000_000)
    tens = [_arguments(100_000) for _ in range(10)]
    big_deltas, ten_deltas = _deltas([big]), _deltas(tens)
    t_big = _best(lambda: _assemble(big_deltas, [json.loads(big)["query"]]))
    t_ten = _best(lambda: _assemble(ten_deltas, [json.loads(a)["query"] for a in tens]))
    rows = [
        _row("StreamAssembler, 1 x 1 MB", len(big), len(big_deltas), t_big),
        _row("StreamAssembler, 10 x 100 KB", sum(map(len, tens)), len(ten_deltas), t_ten),
    ]
    big_fragments = [d.arguments for d in big_deltas[1:]]
    rows.append(
        _row(
            "ProgressScanner alone, 1 x 1 MB", len(big), len(big_fragments), _best(lambda: _scanner_only(big_fragments))
        )
    )

    naive = {}
    for size in (25_000, 50_000):
        args = _arguments(size)
        fragments = [args[i : i + DELTA] for i in range(0, len(args), DELTA)]
        ours = _best(lambda f=fragments: _scanner_only(f))
        naive[size] = _best(lambda f=fragments: _jiter_reparse(f))
        rows.append(_row("ProgressScanner alone", len(args), len(fragments), ours))
        rows.append(_row("jiter partial re-parse per delta", len(args), len(fragments), naive[size]))

    ratio = t_big / t_ten
    extrapolated = naive[50_000] * (1_000_000 / 50_000) ** 2
    print("| case | arguments | deltas | total | per delta |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print(f"1 x 1 MB / 10 x 100 KB time ratio: {ratio:.2f} (must be within 0.5-2.0)")
    print(
        f"jiter 25 KB -> 50 KB time grows {naive[50_000] / naive[25_000]:.1f}x (quadratic is 4x); "
        f"1 MB extrapolated: ~{extrapolated:,.0f} s vs {t_big:.2f} s here"
    )
    return 0 if 0.5 <= ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
