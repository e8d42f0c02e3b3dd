"""The SQLite storage's own thread: calls in order, one at a time, results back on the loop.

`loop.run_in_executor` on a one-worker `ThreadPoolExecutor` does the same with a
`concurrent.futures.Future` per call (a condition, a lock, a chain of callbacks back to an
asyncio future): 41 tracked objects per call in flight against 16 here, counted with the
caller's task (`tests/test_storage.py`), work for every garbage collection while conversations
wait on storage. Here a call is one tuple on a `SimpleQueue` and one `call_soon_threadsafe` back.
A call alone takes 117-171 us here against 184-249 through the executor (`bench/handoff.py`).

A caller cancelled before its call starts has it skipped; one cancelled while it runs stops
waiting, the call finishes (a transaction is never cut halfway) and its result is dropped. The
thread is a daemon so a storage left open cannot hang interpreter exit; an exit hook lets it
finish what was queued first.
"""

from __future__ import annotations

import asyncio
import atexit
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]
_STOP_WAIT = 30.0  # seconds an exiting interpreter waits for queued calls


class StorageThread:
    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue `fn(*args)`; the returned future (of the running loop) gets its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, future, fn, args))
        return future

    def stop(self) -> None:
        """Let the queued calls finish, then end the thread (blocks; call when nothing is queued)."""
        atexit.unregister(self.stop)
        if self._thread.is_alive():
            self._calls.put(None)
            self._thread.join(_STOP_WAIT)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            _answer(*item)
            del item  # hold nothing while idle


def _answer(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    if future.cancelled():  # its caller gave up before it started: skipped, as an executor would
        return
    try:
        result, error = fn(*args), None
    except BaseException as exc:  # handed to the caller, whatever it is
        result, error = None, exc
    try:
        loop.call_soon_threadsafe(_settle, future, result, error)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
