"""`LiveExecutions`: which execution of a thread is live in this process, and
what was said for a thread whose execution is not live yet.

One owner for it, so a stop or force-turn cannot fall between two registries:
`Thread` (runtime.py), the server's `Runs` and the Temporal activity all read
and write the live executions here. The lease (storage) is what keeps one
execution per thread across processes; this is only this process's view.

A force-turn said at rest is kept per thread and applied when the next
execution starts here (by whichever path starts it). A stop said after
run()/send()/start() was called but before the execution holds the lease is
kept for that start (a `StartTicket`), and dropped when nobody is starting.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from orchestrator.core.messages import SideName
    from orchestrator.definitions.thread_state import ExecutionState

__all__ = ["LiveExecutions", "StartTicket"]

_T = TypeVar("_T")


class LiveExecutions:
    def __init__(self) -> None:
        self._running: dict[str, ExecutionState] = {}
        self._forced: dict[str, SideName] = {}  # force_turn at rest, applied when the next execution starts
        self._starting: Counter[str] = Counter()  # per thread: announced starts not yet holding the lease
        self._stops: dict[str, str] = {}  # stops said while a start was announced: applied once it holds the lease

    # -- what runs ------------------------------------------------------------
    def get(self, thread_id: str) -> ExecutionState | None:
        """The thread's execution running here, if any."""
        return self._running.get(thread_id)

    def running(self, thread_id: str) -> bool:
        return thread_id in self._running

    def started(self, thread_id: str, execution: ExecutionState) -> None:
        """`execution` holds the thread's lease here: it is the live one, and a
        side forced while the thread rested takes its next turn."""
        self._running[thread_id] = execution
        forced = self._forced.pop(thread_id, None)
        if forced is not None:
            execution.force_turn(forced)

    def ended(self, thread_id: str, execution: ExecutionState) -> None:
        """`execution` is over; only it is forgotten (a refused second start must not unregister the first)."""
        if self._running.get(thread_id) is execution:
            del self._running[thread_id]

    # -- controls -------------------------------------------------------------
    def force_turn(self, thread_id: str, side: SideName) -> bool:
        """Give `side` the next turn: after the running execution's current step
        (True), or at the thread's next execution here (False)."""
        if side not in ("a", "b"):
            raise ValueError(f"force_turn: side must be 'a' or 'b', got {side!r}")
        execution = self._running.get(thread_id)
        if execution is not None:
            execution.force_turn(side)
            return True
        self._forced[thread_id] = side
        return False

    def stop(self, thread_id: str, reason: str) -> bool:
        """Stop the running execution (`stopped_by` "caller"), or keep the stop for
        the start under way. False when there is nothing to stop."""
        execution = self._running.get(thread_id)
        if execution is not None:
            execution.stop(reason, by="caller")
            return True
        if self._starting.get(thread_id, 0) > 0:
            self._stops[thread_id] = reason
            return True
        return False

    def stop_all(self, reason: str) -> None:
        """Stop every execution running here, and every one being started (it ends before its first request)."""
        for execution in list(self._running.values()):
            execution.stop(reason, by="caller")
        for thread_id, count in self._starting.items():
            if count > 0:
                self._stops[thread_id] = reason

    # -- starts said before they hold the lease --------------------------------
    def announce(self, thread_id: str) -> StartTicket:
        """A run()/send()/start() call: from now on a stop for the thread is kept for it."""
        self._starting[thread_id] += 1
        return StartTicket(self, thread_id)

    def _settle(self, thread_id: str, execution: ExecutionState | None) -> None:
        self._starting[thread_id] -= 1
        if self._starting[thread_id] <= 0:
            del self._starting[thread_id]
        if execution is not None:
            reason = self._stops.pop(thread_id, None)
            if reason is not None:
                execution.stop(reason, by="caller")
        elif thread_id not in self._starting:
            self._stops.pop(thread_id, None)  # nobody left to apply it to


class StartTicket:
    """One announced start; settled exactly once: holding the lease, or given up
    (also when its coroutine is dropped without ever being awaited)."""

    __slots__ = ("_finalizer", "_live", "_settled", "_thread_id")

    def __init__(self, live: LiveExecutions, thread_id: str) -> None:
        self._live = live
        self._thread_id = thread_id
        self._settled = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def settle(self, execution: ExecutionState | None) -> None:
        """The start holds the lease (`execution`: a stop kept for it applies now) or gave up (None)."""
        if not self._settled:
            self._settled = True
            self._live._settle(self._thread_id, execution)

    def watch(self, coro: Coroutine[Any, Any, _T]) -> Coroutine[Any, Any, _T]:
        self._finalizer = weakref.finalize(coro, self.settle, None)
        return coro

    def running(self) -> None:
        """The watched coroutine runs: from here on it settles the ticket on every path itself, and a
        finalizer kept for the whole execution is a dozen objects more in every full collection."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
