"""Where the `stream: litellm` path's distance to a bare `acompletion` loop goes (issue 14, item 5).

    .venv/bin/python bench/gap.py [rounds] [--wire openai|anthropic|gemini] [--scenario b|c]
                                  [--chunks N] [--size N] [--stream litellm|auto]

Contenders in this one process against one fake provider, each round running three
conversations of each in a fresh random order, then the median of the per-round ratios to the
bare loop:

- the bare loop, twice: the second copy is the noise floor (it should read x1.00; a fixed order
  put it 2-4% off on this machine, whichever contender ran right after another paying for it);
- the same loop reading through the runtime's `ModelClient`: what the provider layer adds;
- the runtime, `stream: litellm`, as shipped;
- the runtime with its storage's commits answered at once in memory (no SQLite, no thread hop):
  what is left with no commit at all;
- the same for the person's message and the tool results only: the most that overlapping those
  commits with the next model request could save;
- the runtime with its model replayed from memory (no HTTP, no LiteLLM): its own work alone;
- the bare loop, then the runtime replayed, one after the other: the sum of the parts. Against
  the runtime as shipped it shows what running the two together costs beyond the parts.

`--chunks` and `--size` shape the answer (text chunks, characters per chunk; tool arguments are
cut in pieces of `size` too). The default, 20 chunks of 8, is `python -m bench`'s scenario b;
`--chunks 50 --size 1` is the conversation issue 14 measured (a 50-chunk answer, 16-23 pieces per
tool argument).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.contenders.loops import LiteLLMLoop, ModelClientLoop
from bench.contenders.runtime import RuntimeContender
from bench.fake_provider import model_name
from bench.run import fake_server
from orchestrator.core.messages import Message
from orchestrator.storage import StepWrite
from orchestrator.storage.sqlite import SQLiteStorage

_PER_ROUND = 3  # conversations of each contender per round


class _InstantCommits(SQLiteStorage):
    """Commits answered at once, in memory: messages numbered per thread, nothing written.
    Everything else (the thread, the lease, the history) still goes to SQLite."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self._last: dict[str, int] = {}

    async def commit(self, write: StepWrite) -> list[Message]:
        last = self._last.get(write.thread_id, 0)
        self._last[write.thread_id] = last + len(write.new_messages)
        return [m.model_copy(update={"seq": last + i}) for i, m in enumerate(write.new_messages, start=1)]


class _HiddenCommitsFree(SQLiteStorage):
    """Only the commits that overlapping them with the next request could hide (the person's message and
    the tool results) answered at once, in memory; a step's answer and the execution's end still go to
    SQLite. An upper bound: an overlap would still spend their CPU, on the storage thread."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self._last: dict[str, int] = {}

    async def commit(self, write: StepWrite) -> list[Message]:
        if not write.new_messages or any(m.role not in ("tool", "user") for m in write.new_messages):
            return await super().commit(write)
        last = self._last.get(write.thread_id, 1_000_000)  # numbered apart from what SQLite numbers
        self._last[write.thread_id] = last + len(write.new_messages)
        return [m.model_copy(update={"seq": last + i}) for i, m in enumerate(write.new_messages, start=1)]


class _Replayed:
    """The runtime with its model replayed (`RuntimeContender.own_conversation`), after `before` if given."""

    def __init__(self, runtime: RuntimeContender, before: LiteLLMLoop | None = None) -> None:
        self._runtime = runtime
        self._before = before

    async def conversation(self, scenario: str, model: str) -> int:
        if self._before is not None:
            await self._before.conversation(scenario, model)
        return await self._runtime.own_conversation(scenario, model)

    async def close(self) -> None:
        await self._runtime.close()


def _contenders(url: str, wire: str, stream: str) -> dict[str, Any]:
    def runtime(storage: Callable[[Path], Any] | None = None) -> RuntimeContender:
        return RuntimeContender(url, stream=stream, wire=wire, storage=storage)

    return {
        "bare acompletion loop": LiteLLMLoop(url, wire=wire),
        "bare acompletion loop, again (noise floor)": LiteLLMLoop(url, wire=wire),
        "the loop through ModelClient (provider layer)": ModelClientLoop(url, wire=wire),
        f"this runtime, stream: {stream}": runtime(),
        "this runtime, commits free": runtime(_InstantCommits),
        "this runtime, person and tool-result commits free": runtime(_HiddenCommitsFree),
        "this runtime, model replayed (its own work)": _Replayed(runtime()),
        "bare loop, then the runtime replayed (sum of parts)": _Replayed(runtime(), LiteLLMLoop(url, wire=wire)),
    }


Times = dict[str, list[tuple[float, float]]]  # contender -> (wall, CPU) seconds per conversation, one per round


async def interleaved(
    contenders: dict[str, Any],
    scenario: str,
    model: str,
    rounds: int,
    before: Callable[[str], None] | None = None,
) -> Times:
    """`_PER_ROUND` conversations of each contender per round, in a fresh random order every round, after two
    rounds of warm-up; `before(key)` runs before each contender's turn (bench/handoff.py swaps the storage's calls)."""
    times: Times = {key: [] for key in contenders}
    for warm in (True, False):
        for _ in range(2 if warm else rounds):
            order = list(contenders.items())
            random.shuffle(order)
            for key, contender in order:
                if before is not None:
                    before(key)
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(_PER_ROUND):
                    await contender.conversation(scenario, model)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if not warm:
                    times[key].append((wall / _PER_ROUND, cpu / _PER_ROUND))
    return times


def print_ratios(times: Times, base: str, first_column: str) -> None:
    """A markdown table: medians per contender, and the median of its per-round ratios to `base`."""
    print(f"| {first_column} | wall ms | x bare (wall) | CPU ms | x bare (CPU) |\n|---|---:|---:|---:|---:|")
    for key, rows in times.items():
        wall = statistics.median(a[0] / b[0] for a, b in zip(rows, times[base], strict=True))
        cpu = statistics.median(a[1] / b[1] for a, b in zip(rows, times[base], strict=True))
        print(
            f"| {key} | {statistics.median(r[0] for r in rows) * 1000:.1f} | x{wall:.3f} "
            f"| {statistics.median(r[1] for r in rows) * 1000:.1f} | x{cpu:.3f} |"
        )


async def _measure(url: str, wire: str, stream: str, scenario: str, rounds: int, chunks: int, size: int) -> None:
    contenders = _contenders(url, wire, stream)
    times = await interleaved(contenders, scenario, model_name(scenario, chunks=chunks, size=size), rounds)
    print(
        f"scenario {scenario} ({chunks}-chunk answer, {size} characters per chunk and per argument piece), "
        f"{wire} route, {'LiteLLM' if stream == 'litellm' else 'the runtime'}'s stream reader for the runtime, "
        f"{rounds} rounds of {_PER_ROUND}, shuffled per round"
    )
    print_ratios(times, "bare acompletion loop", "contender")
    for contender in contenders.values():
        await contender.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("rounds", nargs="?", type=int, default=40)
    parser.add_argument("--wire", choices=("openai", "anthropic", "gemini"), default="openai")
    parser.add_argument("--scenario", choices=("b", "c"), default="b")
    parser.add_argument("--chunks", type=int, default=20, help="text chunks in the answer (default: the bench's 20)")
    parser.add_argument("--size", type=int, default=8, help="characters per chunk and per argument piece (default 8)")
    parser.add_argument(
        "--stream", choices=("litellm", "auto"), default="litellm", help="the runtime's provider `stream` setting"
    )
    args = parser.parse_args()
    with fake_server() as url:
        asyncio.run(_measure(url, args.wire, args.stream, args.scenario, args.rounds, args.chunks, args.size))


if __name__ == "__main__":
    main()
