"""The process-wide sandbox budget: runs at once per language, and memory in total.

Why process-wide and thread-safe: every run may hold up to the memory ceiling
(a JavaScript run inside this process, a Python run in a child), and runs are
started from any event loop of the process (the server's, a worker's, a
test's). A run reserves the ceiling before it starts and gives it back when its
engine has really stopped (a JavaScript engine that ignores its interrupt
keeps its share until its thread ends). A run that does not fit waits, in
order of arrival, within its own deadline; a run that fits may pass a waiter
that does not (a JavaScript run is not held up behind a full Python pool).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.settings import SandboxSettings


class BudgetTimeout(Exception):
    """The deadline passed while the run waited for its share of the budget."""


@dataclass
class _Waiter:
    kind: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Lease]


@dataclass
class Lease:
    """A granted share; `release` is idempotent and callable from any thread."""

    budget: Budget
    kind: str
    bytes: int
    _released: bool = field(default=False, repr=False)

    def release(self) -> None:
        self.budget._give_back(self)


class Budget:
    def __init__(self, settings: SandboxSettings, run_bytes: int) -> None:
        self._lock = threading.Lock()
        self._settings = settings
        self._run_bytes = run_bytes
        self._running: dict[str, int] = {}
        self._memory = 0
        self._waiters: list[_Waiter] = []

    def configure(self, settings: SandboxSettings) -> None:
        """New limits apply to runs granted from now on; running ones keep their share."""
        with self._lock:
            self._settings = settings
            self._grant_waiters()

    async def acquire(
        self, kind: str, timeout: float, on_abort: Callable[[Callable[[], object]], None]
    ) -> Lease | None:
        """A lease, or None if aborted while waiting; BudgetTimeout past `timeout` seconds."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._fits(kind):  # no waiter fits (they are granted on every release), so none is passed unfairly
                return self._grant(kind)
            waiter = _Waiter(kind, loop, loop.create_future())
            self._waiters.append(waiter)
        aborted: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not aborted.done():
                aborted.set_result(None)

        on_abort(lambda: loop.call_soon_threadsafe(wake))
        either: list[asyncio.Future[Any]] = [waiter.future, aborted]
        try:
            await asyncio.wait(either, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled while waiting: a lease granted meanwhile goes back
            late = self._withdraw(waiter)
            if late is not None:
                late.release()
            raise
        granted = self._withdraw(waiter)
        if granted is not None and not aborted.done():
            return granted
        if granted is not None:
            granted.release()
        if aborted.done():
            return None
        raise BudgetTimeout(self._describe(kind, timeout))

    def _withdraw(self, waiter: _Waiter) -> Lease | None:
        """Stop waiting; the lease if it was delivered (the caller owns it then).

        A grant still on its way (scheduled on this loop) finds the future
        cancelled and gives its lease back itself.
        """
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                return None
        if waiter.future.done() and not waiter.future.cancelled():
            return waiter.future.result()
        waiter.future.cancel()
        return None

    def _fits(self, kind: str) -> bool:
        cap = self._settings.max_python_runs if kind == "python" else self._settings.max_javascript_runs
        return self._running.get(kind, 0) < cap and self._memory + self._run_bytes <= self._settings.memory_budget_bytes

    def _grant(self, kind: str) -> Lease:
        self._running[kind] = self._running.get(kind, 0) + 1
        self._memory += self._run_bytes
        return Lease(self, kind, self._run_bytes)

    def _give_back(self, lease: Lease) -> None:
        with self._lock:
            if lease._released:
                return
            lease._released = True
            self._running[lease.kind] -= 1
            self._memory -= lease.bytes
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        """Under the lock: hand leases to waiters that fit now, oldest first."""
        for waiter in list(self._waiters):
            if not self._fits(waiter.kind):
                continue
            self._waiters.remove(waiter)
            lease = self._grant(waiter.kind)
            try:
                waiter.loop.call_soon_threadsafe(_deliver, waiter.future, lease)
            except RuntimeError:  # the waiter's loop is closed: nobody will take it
                lease._released = True
                self._running[lease.kind] -= 1
                self._memory -= lease.bytes

    def _describe(self, kind: str, timeout: float) -> str:
        settings = self._settings
        cap = settings.max_python_runs if kind == "python" else settings.max_javascript_runs
        return (
            f"timed out after {timeout:g}s waiting for a sandbox: this process runs at most {cap} {kind} "
            f"sandbox(es) at once within {settings.memory_budget_bytes // 2**20} MiB "
            "(runtime.sandbox in the config)"
        )


def _deliver(future: asyncio.Future[Lease], lease: Lease) -> None:
    if future.done():  # the waiter gave up (cancelled the future) between the grant and now
        lease.release()
    else:
        future.set_result(lease)
