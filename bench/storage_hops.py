"""Where a storage call's time goes on the critical path: the hops to SQLite's thread and back.

    .venv/bin/python bench/storage_hops.py [conversations] [--stream auto|litellm]

Scenario b through the runtime (SQLite storage, every call sent to its thread, as a busy storage
thread queues them; an idle one's run at once on the loop's thread), timing each call to the
storage thread (`orchestrator/storage/_thread.py`) in four parts, medians over every call:

- queued to started: from `StorageThread.call` until the thread picks the call up (the thread's
  wake-up, and the GIL it must take back from the event loop);
- run: the call itself on the thread (SQLite and the Python around it);
- answered to settled: from the thread's `call_soon_threadsafe` until the loop runs the callback
  that settles the future (the loop's wake-up);
- settled to resumed (commits only): until the awaiting coroutine runs again.

The thread's functions are swapped for timed copies of the same steps (bench only).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.contenders.runtime import RuntimeContender
from bench.fake_provider import model_name
from bench.run import fake_server
from orchestrator.storage import _thread, sqlite
from orchestrator.storage.base import StepWrite

_QUEUED: list[float] = []
_RUN: list[float] = []
_SETTLE: list[float] = []
_RESUME: list[float] = []
_STAMPS: dict[int, list[float]] = {}  # id(future) -> [queued, answered, settled], until the call is over
_COMMITS: set[int] = set()  # id(future) of the commits: their stamps wait for the coroutine to resume


def _call(self: _thread.StorageThread, fn: Callable[..., Any], *args: Any, here: Any = None) -> asyncio.Future[Any]:
    future = asyncio.get_running_loop().create_future()
    _STAMPS[id(future)] = [time.perf_counter(), 0.0, 0.0]
    with self._lock:
        self._in_flight += 1
    self._calls.put((self, asyncio.get_running_loop(), future, fn, args))
    return future


def _answer(
    owner: _thread.StorageThread,
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    fn: Callable[..., Any],
    args: Any,
) -> None:
    stamps = _STAMPS[id(future)]
    started = time.perf_counter()
    _QUEUED.append(started - stamps[0])
    try:
        result, error = fn(*args), None
    except BaseException as exc:
        result, error = None, exc
    stamps[1] = time.perf_counter()
    _RUN.append(stamps[1] - started)
    loop.call_soon_threadsafe(_settle, owner, future, result, error)


def _settle(
    owner: _thread.StorageThread, future: asyncio.Future[Any], result: Any, error: BaseException | None
) -> None:
    stamps = _STAMPS[id(future)]
    stamps[2] = time.perf_counter()
    _SETTLE.append(stamps[2] - stamps[1])
    if id(future) not in _COMMITS:
        del _STAMPS[id(future)]
    _thread._settle(owner, future, result, error)


async def _commit(self: sqlite.SQLiteStorage, write: StepWrite) -> Any:
    future = self._run(sqlite._write_tx, sqlite._commit, write)
    _COMMITS.add(id(future))
    stored = await future
    _RESUME.append(time.perf_counter() - _STAMPS.pop(id(future))[2])
    _COMMITS.discard(id(future))
    return stored


async def _measure(url: str, stream: str, conversations: int) -> None:
    contender = RuntimeContender(url, stream=stream)
    model = model_name("b", chunks=20)
    for _ in range(10):
        await contender.conversation("b", model)
    for parts in (_QUEUED, _RUN, _SETTLE, _RESUME):
        parts.clear()
    wall = time.perf_counter()
    for _ in range(conversations):
        await contender.conversation("b", model)
    wall = (time.perf_counter() - wall) / conversations
    await contender.close()
    print(f"scenario b, stream: {stream}, {conversations} conversations of {wall * 1000:.1f} ms")
    print(f"{len(_RUN) / conversations:.1f} storage calls per conversation, {len(_RESUME) / conversations:.1f} commits")
    print("| part of a storage call | median us |\n|---|---:|")
    for label, parts in (
        ("queued to started (the thread wakes, takes the GIL)", _QUEUED),
        ("run on the thread", _RUN),
        ("answered to settled (the loop wakes)", _SETTLE),
        ("settled to resumed (commits)", _RESUME),
    ):
        print(f"| {label} | {statistics.median(parts) * 1e6:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("conversations", nargs="?", type=int, default=40)
    parser.add_argument("--stream", choices=("auto", "litellm"), default="auto")
    args = parser.parse_args()
    _thread.StorageThread.call = _call  # type: ignore[method-assign]
    _thread._answer = _answer
    sqlite.SQLiteStorage.commit = _commit  # type: ignore[method-assign]
    with fake_server() as url:
        asyncio.run(_measure(url, args.stream, args.conversations))


if __name__ == "__main__":
    main()
