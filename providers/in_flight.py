"""At most `max_in_flight` requests to a provider at once (100 by default); the rest wait here, in order.

Every stream path sends on LiteLLM's cached httpx clients, whose pools hold 100 connections
(httpx's default limits). Past that, requests used to queue inside httpcore 1.0.9's pool, which,
each time a request arrives or a response is closed, checks every queued request against every
connection (`AsyncConnectionPool._assign_requests_to_connections`): with 1,000 conversations in
flight that took 80% of the process's CPU, and throughput fell to 49-57 conversations a second,
against 126-145 with the queue here (docs/performance.md, 2026-12-02). A semaphore wakes one
waiter per release. The wait is bounded by the model's `timeout`, as httpx bounds its wait for a
connection, and fails the same way: a timeout, retried.
"""

from __future__ import annotations

import asyncio
import weakref

__all__ = ["InFlight"]


class InFlight:
    """One semaphore per provider and event loop (an asyncio primitive belongs to one loop)."""

    def __init__(self) -> None:
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
            weakref.WeakKeyDictionary()
        )

    async def enter(self, provider: str, limit: int, timeout: float) -> asyncio.Semaphore:
        """Wait for a place (at most `timeout` seconds); the caller releases the semaphore returned."""
        loop = asyncio.get_running_loop()
        gates = self._gates.get(loop)
        if gates is None:
            gates = self._gates[loop] = {}
        gate = gates.get(provider)
        if gate is None:
            gate = gates[provider] = asyncio.Semaphore(limit)
        if not gate.locked():
            await gate.acquire()  # a free place: no timer to arm
            return gate
        async with asyncio.timeout(timeout):
            await gate.acquire()
        return gate
