"""A model answer's two deadlines, on one timer moved per chunk for the price of a float store.

A model's `timeout` bounds how long the provider may stay silent, so that deadline moves
with every chunk, and it is lifted while the consumer holds an item (a hook running on
`tool_call_started` is not the provider being slow). Its `total_timeout` bounds the whole
answer, from the request to the end: a stream sending a chunk just inside the gap, forever,
was never cut before. The total is fixed when the answer starts and costs nothing per chunk:
only the timer, when it fires, looks at it.

`asyncio.timeout(...).reschedule` would do the moving by cancelling its timer handle and
pushing a new one on the loop's heap: two handles per chunk, the largest cost the provider
layer added to a stream. Here one timer is armed at a time; when it fires and finds the
deadline moved on, it re-arms itself for the new one, so a stream of chunks arriving well
within the timeout costs one handle per `timeout` of wall time instead of two per chunk.
(A plain `asyncio.timeout` for the total, inside the stream's generator, would cancel the
consumer's task while it is outside the stream; here a total that passes while the consumer
holds an item ends the answer at the next read.)

On expiry it behaves as `asyncio.timeout` does: the task is cancelled, and the
cancellation becomes `TimeoutError` at the `async with` (saying which limit passed)
unless someone else also cancelled the task.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

__all__ = ["IdleDeadline"]


class IdleDeadline:
    """`async with IdleDeadline(timeout, total=...) as deadline:` then `deadline.waiting()` before each
    read and `deadline.holding()` once a chunk arrived."""

    __slots__ = ("_end", "_expired", "_expires", "_handle", "_loop", "_task", "_timeout", "_total")

    def __init__(self, timeout: float, *, total: float | None = None) -> None:
        self._timeout = timeout
        self._total = total
        self._end = math.inf  # when the whole answer must be done (set on entry)
        self._expires: float | None = None  # None: lifted
        self._expired: str | None = None  # which limit passed
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[object] | None = None

    async def __aenter__(self) -> IdleDeadline:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        if self._task is None:
            raise RuntimeError("IdleDeadline must be used inside a task")
        if self._total is not None:
            self._end = self._loop.time() + self._total
        return self

    def waiting(self) -> None:
        """The provider's silence counts from now."""
        assert self._loop is not None, "IdleDeadline used outside `async with`"
        self._expires = self._loop.time() + self._timeout
        if self._handle is None:
            self._handle = self._loop.call_at(min(self._expires, self._end), self._fire)

    def holding(self) -> None:
        """The consumer has an item: its time is not the provider's silence."""
        self._expires = None

    def _fire(self) -> None:
        assert self._loop is not None and self._task is not None
        self._handle = None
        if self._expires is None:
            return  # lifted; the next `waiting` arms a timer again (at once, if the total passed meanwhile)
        now = self._loop.time()
        if now >= self._end:
            self._expired = f"the answer took more than {self._total:g} s in all (the model's total_timeout)"
        elif now >= self._expires:
            self._expired = f"the provider sent nothing for {self._timeout:g} s (the model's timeout)"
        else:
            self._handle = self._loop.call_at(min(self._expires, self._end), self._fire)
            return
        self._task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired is not None:
            assert self._task is not None
            if self._task.uncancel() == 0 and exc_type is asyncio.CancelledError:
                raise TimeoutError(self._expired) from exc
