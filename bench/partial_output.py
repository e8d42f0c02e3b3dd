"""Micro-benchmark: a typed answer's partial object (`output_delta`) must cost time linear in the answer.

Run: .venv/bin/python bench/partial_output.py

Prints a markdown table: one 1 MB typed answer vs ten 100 KB ones, all in 10-byte deltas through
`typed_output.OutputDeltas` (what the executor runs per text delta: `PartialJson` and the event's payload),
and for contrast the naive approach of re-parsing the answer so far with a partial-JSON parser (jiter,
installed as a dependency of openai; bench-only here) on every delta, which is quadratic. The verdict line
says whether the 1 MB / 10 x 100 KB ratio is within 2x (linear); exits 1 if not.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.core.event_payloads import OutputDeltaPayload
from orchestrator.engine.typed_output import OutputDeltas

DELTA = 10
REPEATS = 3
_PARAGRAPH = 'Plain prose for a while, then a "quoted" bit, a back\\slash, a new\nline, café, 😀. ' * 3


def _answer(size: int) -> str:
    """A typed answer of about `size` characters: a report with a long summary and a list of findings."""
    findings = [{"id": i, "title": f"finding {i}", "ok": i % 2 == 0, "score": i / 7} for i in range(size // 140)]
    summary = (_PARAGRAPH * (size // (2 * len(_PARAGRAPH)) + 1))[: size // 2]
    return json.dumps({"summary": summary, "findings": findings, "done": True}, ensure_ascii=False)


def _fragments(text: str) -> list[str]:
    return [text[i : i + DELTA] for i in range(0, len(text), DELTA)]


def _best(run: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _ours(answers: list[list[str]]) -> None:
    last: list[OutputDeltaPayload] = []
    for fragments in answers:
        deltas = OutputDeltas(last.append, "a", 0)
        for fragment in fragments:
            deltas.feed(fragment)
            last.clear()  # a subscriber takes each event; none is kept here


def _jiter_reparse(fragments: list[str]) -> None:
    """What we avoid: re-parse the whole answer so far on every delta."""
    import jiter

    buffer = ""
    for fragment in fragments:
        buffer += fragment
        jiter.from_json(buffer.encode(), partial_mode="trailing-strings")


def _row(case: str, size: int, deltas: int, seconds: float) -> str:
    per_delta = seconds / deltas * 1e6
    return f"| {case} | {size / 1e3:,.0f}k chars | {deltas:,} | {seconds * 1e3:,.1f} ms | {per_delta:.2f} µs |"


def main() -> int:
    big = _fragments(_answer(1_000_000))
    tens = [_fragments(_answer(100_000)) for _ in range(10)]
    t_big = _best(lambda: _ours([big]))
    t_ten = _best(lambda: _ours(tens))
    big_size, ten_size = sum(map(len, big)), sum(len(f) for t in tens for f in t)
    rows = [
        _row("OutputDeltas, 1 x 1 MB", big_size, len(big), t_big),
        _row("OutputDeltas, 10 x 100 KB", ten_size, sum(map(len, tens)), t_ten),
    ]
    naive = {}
    for size in (25_000, 50_000):
        fragments = _fragments(_answer(size))
        rows.append(_row("OutputDeltas", size, len(fragments), _best(lambda f=fragments: _ours([f]))))
        naive[size] = _best(lambda f=fragments: _jiter_reparse(f))
        rows.append(_row("jiter partial re-parse per delta", size, len(fragments), naive[size]))
    ratio = t_big / t_ten
    extrapolated = naive[50_000] * (1_000_000 / 50_000) ** 2
    print("| case | answer | deltas | total | per delta |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    linear = 0.5 <= ratio <= 2.0
    print(f"1 x 1 MB / 10 x 100 KB time ratio: {ratio:.2f} (linear: within 0.5-2.0) -> {'PASS' if linear else 'FAIL'}")
    print(
        f"jiter 25 KB -> 50 KB time grows {naive[50_000] / naive[25_000]:.1f}x (quadratic is 4x); "
        f"1 MB extrapolated: ~{extrapolated:,.0f} s vs {t_big:.2f} s here"
    )
    return 0 if linear else 1


if __name__ == "__main__":
    sys.exit(main())
