"""Executions the server started, as asyncio tasks the app owns.

A run can last minutes, so routes start it here and answer 202 at once;
clients follow on the thread's WebSocket. One execution per thread: a second
start while the first is alive is refused with `ThreadBusyError` before any
task is made (the check and the registration happen without an `await` in
between, so two concurrent requests cannot both pass).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import structlog

from ..executor import ExecutionFailed, ExecutionResult
from ..messages import SideName
from ..runtime import Runtime, Thread
from ..storage.base import ThreadBusyError

_log = structlog.get_logger("orchestrator.server")


class Runs:
    queued = False  # True when workers run the executions (QueuedRuns)

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._tasks: dict[str, asyncio.Task[ExecutionResult]] = {}
        self._forced: dict[str, SideName] = {}  # force_turn asked while idle (see bugs.md: Thread._forced is per handle)

    def running(self, thread_id: str) -> bool:
        task = self._tasks.get(thread_id)
        return (task is not None and not task.done()) or thread_id in self._runtime._running

    def start(self, thread: Thread, text: str | None) -> asyncio.Task[ExecutionResult]:
        """Start `thread.run()` (text None) or `thread.send(text)` in the background."""
        if self.running(thread.id):
            raise ThreadBusyError(f"thread {thread.id} is already running an execution; stop it or wait for execution_stopped")
        forced = self._forced.pop(thread.id, None)
        if forced is not None:
            thread.force_turn(forced)
        execution = thread.run() if text is None else thread.send(text)  # announced now: a stop from here on is kept
        task = asyncio.get_running_loop().create_task(self._run(thread, execution), name=f"execution:{thread.id}")
        self._tasks[thread.id] = task
        task.add_done_callback(lambda t, tid=thread.id: self._forget(tid, t))
        return task

    async def _run(self, thread: Thread, execution: Coroutine[Any, Any, ExecutionResult]) -> ExecutionResult:
        try:
            return await execution
        except ExecutionFailed:
            raise  # the executor already published execution_failed
        except ThreadBusyError as exc:  # another process holds the lease
            self._publish_failure(thread.id, "thread_busy", str(exc))
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _log.error("background_execution_failed", thread_id=thread.id, error_type=type(exc).__name__)
            self._publish_failure(thread.id, "internal_error", f"{type(exc).__name__}: {exc}")
            raise

    def _publish_failure(self, thread_id: str, code: str, message: str) -> None:
        with contextlib.suppress(Exception):  # the bus redacts known secrets
            self._runtime.services.bus.publish(thread_id, "execution_failed", {"code": code, "error": message})

    def _forget(self, thread_id: str, task: asyncio.Task[Any]) -> None:
        if self._tasks.get(thread_id) is task:
            del self._tasks[thread_id]
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" noise

    async def wait(self, thread_id: str) -> ExecutionResult | None:
        """The result of the execution this app is running on the thread (None when none is)."""
        task = self._tasks.get(thread_id)
        return None if task is None else await asyncio.shield(task)

    def force_turn(self, thread: Thread, side: SideName) -> bool:
        """Force now if running; else remember it for the next start. True when running."""
        if thread.execution is not None:
            thread.force_turn(side)
            return True
        self._forced[thread.id] = side
        return False

    def stop(self, thread: Thread, reason: str = "stopped by user") -> bool:
        """Stop the execution, or the one being started (kept until it holds the lease)."""
        return thread.stop(reason)

    async def shutdown(self) -> None:
        """Stop every execution we started and wait for them to store their end."""
        self._runtime.stop_all("server shutting down")
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


class QueuedRuns(Runs):
    """Executions run by workers (`orchestrator worker`): starting one puts it on
    the PostgreSQL queue; stop and force_turn travel to the worker holding the
    thread through the broker. Busy threads are refused by the workers' leases."""

    queued = True

    def __init__(self, runtime: Runtime, queue: Any, broker: Any) -> None:
        super().__init__(runtime)
        self._queue = queue
        self._broker = broker

    def running(self, thread_id: str) -> bool:
        return False  # only the workers know; the thread's status says "running"

    def start(self, thread: Thread, text: str | None) -> asyncio.Task[Any]:
        from ..worker import submit

        return asyncio.get_running_loop().create_task(submit(self._runtime, self._queue, thread.id, text))

    def force_turn(self, thread: Thread, side: SideName) -> bool:
        asyncio.get_running_loop().create_task(self._broker.force_turn(thread.id, side))
        return True

    def stop(self, thread: Thread, reason: str = "stopped by user") -> bool:
        asyncio.get_running_loop().create_task(self._broker.stop(thread.id, reason))
        return True
