"""Executions the server started, as asyncio tasks the app owns.

A run can last minutes, so routes start it here and answer 202 at once;
clients follow on the thread's WebSocket. One execution per thread: a second
start while the first is alive is refused with `ThreadBusyError` before any
task is made (the check and the registration happen without an `await` in
between, so two concurrent requests cannot both pass). Which execution is live,
and a force-turn said at rest, are the runtime's `live` (live.py): an execution
started here or from Python is seen the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, Literal

import structlog

from orchestrator.core.messages import SideName
from orchestrator.engine.executor import ExecutionFailed, ExecutionResult
from orchestrator.runtime import Runtime, Thread
from orchestrator.storage.base import ThreadBusyError

if TYPE_CHECKING:
    from orchestrator.storage.broker import RedisBroker
    from orchestrator.temporal import ThreadRequests

_log = structlog.get_logger("orchestrator.server")


class Runs:
    queued = False  # True when workers run the executions (QueuedRuns)

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._tasks: dict[str, asyncio.Task[ExecutionResult]] = {}

    def running(self, thread_id: str) -> bool:
        task = self._tasks.get(thread_id)
        return (task is not None and not task.done()) or self._runtime.live.running(thread_id)

    def start(self, thread: Thread, text: str | None) -> asyncio.Task[ExecutionResult]:
        """Start `thread.run()` (text None) or `thread.send(text)` in the background."""
        if self.running(thread.id):
            raise ThreadBusyError(
                f"thread {thread.id} is already running an execution; stop it or wait for execution_stopped"
            )
        execution = thread.run() if text is None else thread.send(text)  # announced now: a stop from here on is kept
        task = asyncio.get_running_loop().create_task(self._run(thread, execution), name=f"execution:{thread.id}")
        self._tasks[thread.id] = task
        task.add_done_callback(functools.partial(self._forget, thread.id))
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

    def _publish_failure(self, thread_id: str, code: Literal["thread_busy", "internal_error"], message: str) -> None:
        with contextlib.suppress(Exception):  # the bus redacts known secrets
            self._runtime.services.bus.publisher(thread_id)("execution_failed", {"code": code, "error": message})

    def _forget(self, thread_id: str, task: asyncio.Task[ExecutionResult]) -> None:
        if self._tasks.get(thread_id) is task:
            del self._tasks[thread_id]
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" noise

    async def wait(self, thread_id: str) -> ExecutionResult | None:
        """The result of the execution this app is running on the thread (None when none is)."""
        task = self._tasks.get(thread_id)
        return None if task is None else await asyncio.shield(task)

    def force_turn(self, thread: Thread, side: SideName) -> bool:
        """Force now if running; else remember it for the thread's next start. True when running."""
        return self._runtime.live.force_turn(thread.id, side)

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
    """Executions run by workers (`orchestrator worker`) on Temporal: each request
    goes to the thread's workflow and is answered only once Temporal stored it
    (`TemporalUnavailable` otherwise, which the route turns into a 503). Stop and
    force-turn are stored the same way, then also sent live on the broker."""

    queued = True

    def __init__(self, runtime: Runtime, requests: ThreadRequests, broker: RedisBroker) -> None:
        super().__init__(runtime)
        self.requests = requests
        self._broker = broker

    def running(self, thread_id: str) -> bool:
        return False  # only the workers know; the thread's status says "running"

    def start(self, thread: Thread, text: str | None) -> asyncio.Task[ExecutionResult]:
        raise TypeError("QueuedRuns: use `await submit(...)`: a queued request is answered once Temporal stored it")

    async def submit(self, thread: Thread, text: str | None, *, wait: bool = False) -> ExecutionResult | None:
        """Queue a run or a person's message; with `wait`, the result once it ended."""
        await self._runtime.open()
        await self._runtime.services.bus.flush(
            thread.id
        )  # the API side's events first: the worker numbers on from them
        last_flow = await self._last_flow(thread.id)
        if not wait:
            await self.requests.submit(thread.id, text, last_flow=last_flow)
            return None
        outcome = await self.requests.submit_and_wait(thread.id, text, last_flow=last_flow)
        if outcome.error is not None or outcome.flow_id is None:
            raise QueuedRequestFailed(outcome.code or "not_served", outcome.error or "the request was not served")
        return await self._result(thread.id, outcome.flow_id)

    async def submit_resume(self, thread: Thread) -> None:
        """Queue the resume of a thread whose waiting calls are decided (the decisions are stored already)."""
        await self._runtime.services.bus.flush(thread.id)  # the decisions' events first: the worker numbers on
        await self.requests.submit(thread.id, None, last_flow=await self._last_flow(thread.id), resume=True)

    async def request_stop(self, thread: Thread, reason: str = "stopped by user") -> bool:
        """True when the thread has requests (running or queued) the stop now applies to."""
        delivered = await self.requests.stop(thread.id, reason)
        if delivered:
            await self._live(self._broker.stop(thread.id, reason))
        return delivered and (await self._runtime.storage.get_thread(thread.id)).status == "running"

    async def request_force_turn(self, thread: Thread, side: SideName) -> bool:
        await self.requests.force_turn(thread.id, side, last_flow=await self._last_flow(thread.id))
        await self._live(self._broker.force_turn(thread.id, side))
        return (await self._runtime.storage.get_thread(thread.id)).status == "running"

    async def _live(self, send: Awaitable[object]) -> None:
        try:
            await send
        except Exception as exc:  # the workflow has it: the running attempt applies it on its next start
            _log.warning("live_control_failed", error=str(exc))

    async def _last_flow(self, thread_id: str) -> str | None:
        record = await self._runtime.storage.get_thread(thread_id)
        return record.execution.flow_id if record.execution is not None else None

    async def _result(self, thread_id: str, flow_id: str) -> ExecutionResult:
        """The result of a served request, from storage (Temporal carries ids, not transcripts)."""
        record = await self._runtime.storage.get_thread(thread_id)
        snap = record.execution
        messages = (await self._runtime.storage.get_messages(thread_id, include_silent=True)).messages
        new = [m for m in messages if m.flow_id == flow_id]
        output = next((m.content for m in reversed(new) if m.role == "assistant" and m.content and m.depth == 0), None)
        ran = snap if snap is not None and snap.flow_id == flow_id else None
        return ExecutionResult(
            thread_id=thread_id,
            flow_id=flow_id,
            stopped_by=ran.stopped_by if ran else None,
            reason=(ran.reason if ran else None) or "rest",
            step_count=ran.step_count if ran else 0,
            side_a_step_count=ran.side_a_step_count if ran else 0,
            side_b_step_count=ran.side_b_step_count if ran else 0,
            usage=record.usage,
            output=output,
            new_messages=new,
        )


class QueuedRequestFailed(RuntimeError):
    """A waited-for request ended without being served (`code`: execution_failed or not_served)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
