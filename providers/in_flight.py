"""At most `max_in_flight` requests to a provider at once (100 by default); the rest wait here, in order.

Every stream path sends on LiteLLM's cached httpx clients, whose pools hold 100 connections
(httpx's default limits). Past that, requests used to queue inside httpcore 1.0.9's pool, which,
each time a request arrives or a response is closed, checks every queued request against every
connection (`AsyncConnectionPool._assign_requests_to_connections`): with 1,000 conversations in
flight that took 80% of the process's CPU, and throughput fell to 45-63 conversations a second,
against 150 with the queue here (docs/performance.md, 2026-12-02). A semaphore wakes one
waiter per release. The wait has no deadline of its own: a place comes back when its request ends,
and a silent provider's request ends at the model's `timeout` (the idle deadline); an abort reaches
a waiting request as it does one in flight.
"""

from __future__ import annotations

import asyncio
import weakref

__all__ = ["InFlight"]


class InFlight:
    """One semaphore per provider and event loop (an asyncio primitive belongs to one loop)."""

    def __init__(self) -> None:
        self._places: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
            weakref.WeakKeyDictionary()
        )

    def places(self, provider: str, limit: int) -> asyncio.Semaphore:
        """The provider's semaphore on this loop: `acquire` it before a request, `release` it once closed."""
        loop = asyncio.get_running_loop()
        places = self._places.get(loop)
        if places is None:
            places = self._places[loop] = {}
        place = places.get(provider)
        if place is None:
            place = places[provider] = asyncio.Semaphore(limit)
        return place
