"""The SQLite storage's own thread: calls in order, one at a time, results back on the loop.

`loop.run_in_executor` on a one-worker `ThreadPoolExecutor` does the same with a
`concurrent.futures.Future` per call (a condition, a lock, a chain of callbacks back to an
asyncio future): 41 tracked objects per call in flight against 16 here, counted with the
caller's task (`tests/test_sqlite_thread.py`), work for every garbage collection while conversations
wait on storage. Here a call is one tuple on a `SimpleQueue` and one `call_soon_threadsafe` back.
A call alone takes 117-171 us here against 184-249 through the executor (`bench/handoff.py`).

Most of those microseconds are two wake-ups (the thread's, then the loop's), not the call. So a
call made while the thread has nothing queued or running may run at once on the caller's thread
instead (`here`): nothing is ahead of it, so the order holds. Its future is answered on the
loop's next turn, so awaiting a storage call yields to the loop however it ran. `here` raises
`Elsewhere` for a call that must wait (SQLite: another process holds the write lock), which then
goes to the thread like any other. Under load the thread is rarely idle and calls queue as
before, so SQLite's own work keeps running beside the event loop rather than on it.

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

__all__ = ["Elsewhere", "StorageThread"]

T = TypeVar("T")
_Call = tuple["StorageThread", asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]
_STOP_WAIT = 30.0  # seconds an exiting interpreter waits for queued calls


class Elsewhere(Exception):
    """Raised by a `here` function: this call cannot run now on the caller's thread; queue it."""


class StorageThread:
    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards `_in_flight`, and is held while a call runs `here`
        self._in_flight = 0  # calls queued or running, or answered but not yet settled on their loop
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def call(self, fn: Callable[..., T], *args: Any, here: Callable[..., T] | None = None) -> asyncio.Future[T]:
        """Queue `fn(*args)`; the returned future (of the running loop) gets its result. With `here`,
        and nothing queued or running, `here(*args)` runs now on this thread instead."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if here is not None and self._in_flight == 0:
                try:
                    result = here(*args)
                except Elsewhere:
                    pass
                except BaseException as exc:  # handed to the caller, as from the thread
                    loop.call_soon(_deliver, future, None, exc)
                    return future
                else:
                    # answered on the loop's next turn, not now: awaiting a done future does not yield, and a
                    # coroutine looping over storage calls would then hold the loop for as long as it loops
                    loop.call_soon(_deliver, future, result, None)
                    return future
            self._in_flight += 1
        self._calls.put((self, loop, future, fn, args))
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

    def _settled(self) -> None:
        with self._lock:
            self._in_flight -= 1


def _answer(
    owner: StorageThread,
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    result: Any = None
    error: BaseException | None = None
    if not future.cancelled():  # else its caller gave up before it started: skipped, as an executor would
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the caller, whatever it is
            error = exc
    try:
        loop.call_soon_threadsafe(_settle, owner, future, result, error)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        owner._settled()


def _settle(owner: StorageThread, future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    owner._settled()
    _deliver(future, result, error)


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
