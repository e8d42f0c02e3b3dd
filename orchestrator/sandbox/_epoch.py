"""The wasm epoch clock: a JavaScript run past its deadline stops, even inside a native operation.

Why: QuickJS polls its interrupt handler between bytecodes only. A native
operation (``String.prototype.indexOf`` of a 256 Ki-character needle in an
8 Mi-character haystack, a sort, a regex compile) runs to its end without
polling: minutes, holding its thread and its share of the budget. QuickJS is
wasm, so that native code is wasm too, and wasmtime's epoch interruption
checks at every function entry and loop back-edge: a store whose deadline
epoch has passed traps, wherever it is.

The epoch is engine-wide; each store gets its own deadline, counted in ticks
of one process-wide ticker. The ticker runs only while a run is in flight
(`EpochClock.running`) and ends when the last one does, so an idle process has
no ticking thread. It follows the wall clock (a late wake-up catches up), so a
loaded machine does not stretch a deadline by its scheduling delays.

With epoch interruption on, a store without a deadline traps at its first
check: every store made on the engine is armed before any of its wasm runs
(`EpochClock.arm`), with the deadline of the run on the calling thread, or far
away outside a run (nothing of ours makes one there).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

TICK = 0.01  # seconds per epoch while runs are in flight
_FAR = 2**32  # ticks: the deadline of a store made outside a run (over a year of ticking)


class _Engine(Protocol):
    def increment_epoch(self) -> None: ...


class _Store(Protocol):
    def set_epoch_deadline(self, ticks_after_current: int) -> None: ...


class EpochClock:
    """Counts epochs for one engine while runs are in flight; thread-safe."""

    def __init__(self, engine: _Engine, tick: float = TICK) -> None:
        self._engine = engine
        self._tick = tick
        self._lock = threading.Lock()
        self._in_flight = 0
        self._ticker: threading.Thread | None = None
        self._local = threading.local()

    @contextmanager
    def running(self, deadline: float) -> Iterator[None]:
        """On a run's engine thread: stores made inside trap past `deadline` (`time.monotonic` seconds)."""
        with self._lock:
            self._in_flight += 1
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._tick_while_running, name="sandbox-epoch", daemon=True)
                self._ticker.start()
        self._local.deadline = deadline
        try:
            yield
        finally:
            self._local.deadline = None
            with self._lock:
                self._in_flight -= 1

    def arm(self, store: _Store) -> None:
        """Give a new store its deadline; must come before any of its wasm code runs."""
        deadline: float | None = getattr(self._local, "deadline", None)
        if deadline is None:
            store.set_epoch_deadline(_FAR)
            return
        # one tick more: the first increment may come at once after this call
        store.set_epoch_deadline(max(math.ceil((deadline - time.monotonic()) / self._tick), 0) + 1)

    def ticking(self) -> bool:
        with self._lock:
            return self._ticker is not None

    def _tick_while_running(self) -> None:
        started, done = time.monotonic(), 0
        while True:
            time.sleep(self._tick)
            with self._lock:  # a run entering after this check starts a new ticker
                if self._in_flight == 0:
                    self._ticker = None
                    return
            due = int((time.monotonic() - started) / self._tick)
            for _ in range(due - done):
                self._engine.increment_epoch()
            done = due
