"""Keeping this process's leases alive, and noticing at once when one is gone.

Why it matters: once a lease expires another worker may take the thread, and
two executions then run it (duplicate model calls and tool side effects) until
the stale one's next fenced commit fails. So a renewal that fails for a passing
reason (the database restarting, a lock timeout) is retried while the lease
still has time left; a renewal refused because the lease changed hands, or
retries that run out, mean the lease is lost, and the execution is aborted at
once rather than at its next write.

One `Heartbeat` per runtime renews every lease the process holds, from one task,
every ttl/3; each execution holds only a `LeaseKeeper` (its lease and who to tell
when it is lost). A sleeping task per execution was a task, a coroutine, a sleep,
its future and timer: about 50 references per conversation that every full
collection walked while 1,000 ran, for a renewal most executions end before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from tenacity import (
    AsyncRetrying,
    AttemptManager,
    RetryCallState,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from orchestrator.storage.base import Lease, StaleLeaseError, Storage

__all__ = ["Heartbeat", "LeaseKeeper"]

_log = structlog.get_logger("orchestrator.storage.lease")
_ATTEMPTS = 4  # with waits of ttl/30, /15, /7.5: given up at about 0.57 ttl, before the lease runs out


class LeaseKeeper:
    """One execution's lease, kept alive by the `Heartbeat` that handed it out."""

    __slots__ = ("_callbacks", "_renewal", "lease", "lost", "ttl")

    def __init__(self, lease: Lease, ttl: float) -> None:
        self.lease = lease
        self.ttl = ttl
        self.lost: str | None = None  # why the lease was lost, once it is
        self._callbacks: list[Callable[[str], object]] = []
        self._renewal: asyncio.Task[None] | None = None  # a renewal under way (with its retries)

    def on_lost(self, callback: Callable[[str], object]) -> None:
        """Call `callback(reason)` when the lease is lost (now, if it already is)."""
        if self.lost is not None:
            callback(self.lost)
        else:
            self._callbacks.append(callback)

    def _lose(self, reason: str) -> None:
        self.lost = reason
        _log.error("lease_lost", thread_id=self.lease.thread_id, owner=self.lease.owner, reason=reason)
        for callback in self._callbacks:
            callback(reason)
        self._callbacks.clear()


class Heartbeat:
    """Renews every kept lease every ttl/3 from one task, which runs only while a lease is kept.

    `sleep` is the heartbeat's clock, read at each wait (tests swap in a fake one)."""

    def __init__(self, storage: Storage, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.sleep = sleep
        self._storage = storage
        self._keepers: set[LeaseKeeper] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def keep(self, lease: Lease, ttl: float) -> LeaseKeeper:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a runtime used from a new event loop: what the old one kept died with it
            self._loop, self._keepers, self._task = loop, set(), None
        keeper = LeaseKeeper(lease, ttl)
        self._keepers.add(keeper)
        if self._task is None or self._task.done():  # none yet, or cancelled from outside (a loop's shutdown)
            self._task = loop.create_task(self._beat(), name="lease-heartbeat")
        return keeper

    async def release(self, keeper: LeaseKeeper) -> None:
        """Stop renewing `keeper`'s lease (a renewal under way is cancelled and waited for)."""
        self._keepers.discard(keeper)
        if not self._keepers and self._task is not None:
            self._task.cancel()
            self._task = None
        renewal = keeper._renewal
        if renewal is not None:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal

    async def _beat(self) -> None:
        while self._keepers:
            await self.sleep(min(k.ttl for k in self._keepers) / 3)
            for keeper in list(self._keepers):
                if keeper._renewal is None:  # one still retrying goes on with its own waits
                    keeper._renewal = asyncio.get_running_loop().create_task(self._renew(keeper))
        self._task = None

    async def _renew(self, keeper: LeaseKeeper) -> None:
        # tenacity's loop is built at the first failure, as the model client's is: a retrying loop leaves
        # some 40 objects in reference cycles, garbage that outlives a long conversation's young collections
        attempts: AsyncIterator[AttemptManager] | None = None
        try:
            while True:
                try:
                    keeper.lease = await self._storage.renew_lease(keeper.lease, keeper.ttl)
                    return
                except Exception as exc:
                    failure = exc
                if attempts is None:
                    attempts = self._retrying(keeper).__aiter__()
                    manager = await attempts.__anext__()  # attempt 1: the one that just failed
                with manager:
                    raise failure  # recorded as this attempt's outcome
                # the manager swallowed it (mypy cannot know): wait for the next attempt, or raise
                manager = await attempts.__anext__()  # type: ignore[unreachable]
        except Exception as exc:  # refused, or failing for longer than the lease can wait
            self._keepers.discard(keeper)
            keeper._lose(f"lease lost: {type(exc).__name__}: {exc}")
        finally:
            keeper._renewal = None

    def _retrying(self, keeper: LeaseKeeper) -> AsyncRetrying:
        """Built at a renewal's first failure (most never fail)."""

        def log_failure(state: RetryCallState) -> None:
            _log.warning(
                "lease_renewal_failed",
                thread_id=keeper.lease.thread_id,
                attempt=state.attempt_number,
                error=str(state.outcome.exception()) if state.outcome else None,
            )

        return AsyncRetrying(
            retry=retry_if_exception_type(Exception) & retry_if_not_exception_type(StaleLeaseError),
            stop=stop_after_attempt(_ATTEMPTS),
            wait=wait_exponential(multiplier=keeper.ttl / 30, max=keeper.ttl / 6),
            sleep=self.sleep,
            before_sleep=log_failure,
            reraise=True,
        )
