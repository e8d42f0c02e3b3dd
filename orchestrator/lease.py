"""Keeping an execution's lease alive, and noticing at once when it is gone.

Why it matters: once the lease expires another worker may take the thread, and
two executions then run it (duplicate model calls and tool side effects) until
the stale one's next fenced commit fails. So a renewal that fails for a passing
reason (the database restarting, a lock timeout) is retried while the lease
still has time left; a renewal refused because the lease changed hands, or
retries that run out, mean the lease is lost, and the execution is aborted at
once rather than at its next write.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from .storage.base import Lease, StaleLeaseError, Storage

__all__ = ["LeaseKeeper"]

_log = structlog.get_logger("orchestrator.lease")
_ATTEMPTS = 4  # with waits of ttl/30, /15, /7.5: given up at about 0.57 ttl, before the lease runs out


class LeaseKeeper:
    """Renews `lease` every ttl/3 in the background; `on_lost` callbacks run when it is lost."""

    def __init__(
        self, storage: Storage, lease: Lease, ttl: float, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ) -> None:
        self.lease = lease
        self.lost: str | None = None  # why the lease was lost, once it is
        self._storage = storage
        self._ttl = ttl
        self._sleep = sleep
        self._callbacks: list[Callable[[str], object]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LeaseKeeper:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"lease:{self.lease.thread_id}")
        return self

    def on_lost(self, callback: Callable[[str], object]) -> None:
        """Call `callback(reason)` when the lease is lost (now, if it already is)."""
        if self.lost is not None:
            callback(self.lost)
        else:
            self._callbacks.append(callback)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await self._sleep(self._ttl / 3)
            try:
                async for attempt in self._retrying():
                    with attempt:
                        self.lease = await self._storage.renew_lease(self.lease, self._ttl)
            except Exception as exc:  # refused, or failing for longer than the lease can wait
                self._lose(f"lease lost: {type(exc).__name__}: {exc}")
                return

    def _retrying(self) -> AsyncRetrying:
        """Built per renewal, not per execution: most executions end before their first renewal,
        and a policy held for the whole execution is a dozen more objects in every full
        collection while a thousand of them run."""
        return AsyncRetrying(
            retry=retry_if_exception_type(Exception) & retry_if_not_exception_type(StaleLeaseError),
            stop=stop_after_attempt(_ATTEMPTS),
            wait=wait_exponential(multiplier=self._ttl / 30, max=self._ttl / 6),
            sleep=self._sleep,
            before_sleep=self._log_failure,
            reraise=True,
        )

    def _log_failure(self, state: RetryCallState) -> None:
        _log.warning(
            "lease_renewal_failed",
            thread_id=self.lease.thread_id,
            attempt=state.attempt_number,
            error=str(state.outcome.exception()) if state.outcome else None,
        )

    def _lose(self, reason: str) -> None:
        self.lost = reason
        _log.error("lease_lost", thread_id=self.lease.thread_id, owner=self.lease.owner, reason=reason)
        for callback in self._callbacks:
            callback(reason)
        self._callbacks.clear()
