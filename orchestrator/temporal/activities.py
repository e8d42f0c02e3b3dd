"""The execution activity: one request of a thread, run by the existing executor.

An attempt judges the thread first (already served by an earlier attempt whose
worker died before reporting? then it only reports), then runs `execute`, which
takes the thread's lease, resumes from the last stored step and fences every
commit. It heartbeats while it runs (the flow id as details, so the next
attempt can tell its execution apart); a worker that dies or stalls stops
heartbeating and Temporal gives the request to another worker. Stop arrives
as cancellation and becomes `ExecutionState.stop`, so the execution stores
its own end; any other cancellation (worker shutdown, timed out) abandons the
attempt and leaves the thread to the next one. A dual_ai agent's approver decides the calls the execution
left waiting, and the same attempt resumes it, as `Thread` does in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from orchestrator.core import tracing
from orchestrator.engine.approver import simulated_approvals
from orchestrator.engine.executor import ExecutionFailed, execute
from orchestrator.engine.waiting import NotWaitingError
from orchestrator.storage import NotFoundError, StaleLeaseError, ThreadBusyError
from orchestrator.temporal.workflow import (
    EXECUTE_ACTIVITY,
    Controls,
    ExecutionInput,
    Outcome,
    ThreadWorkflow,
    workflow_id,
)

if TYPE_CHECKING:
    from orchestrator.core.messages import SideName, ThreadRecord
    from orchestrator.definitions.thread_state import ExecutionState
    from orchestrator.engine.state import ThreadState
    from orchestrator.runtime import Runtime
    from orchestrator.storage.broker import RedisBroker

__all__ = ["ExecutionActivities"]

_log = structlog.get_logger("orchestrator.temporal")


@dataclass
class _Judged:
    """What the attempt saw before taking the lease, to notice a thread that moved meanwhile."""

    status: str
    flow_id: str | None
    last_seq: int


class ExecutionActivities:
    """Activities bound to one worker's runtime (and its broker, for live events)."""

    def __init__(
        self, runtime: Runtime, client: Client, broker: RedisBroker | None = None, heartbeat_every: float = 1.0
    ) -> None:
        self.runtime = runtime
        self.client = client
        self.broker = broker
        self.heartbeat_every = heartbeat_every
        self._waiting: dict[str, Controls] = {}  # picked, not started yet: controls heard meanwhile

    @activity.defn(name=EXECUTE_ACTIVITY)
    async def execute(self, given: ExecutionInput) -> Outcome:
        with tracing.attach_context(given.trace):  # this execution's spans join the trace of whoever queued it
            return await self._execute(given)

    async def _execute(self, given: ExecutionInput) -> Outcome:
        info = activity.info()
        served_flow = info.heartbeat_details[0] if info.heartbeat_details else None
        controls = Controls(given.stop, given.forced)
        beat = asyncio.create_task(self._heartbeat(given.thread_id, served_flow))
        # A retry also reads what was asked while the last attempt ran; not on the way to starting:
        # the query may wait for the dead worker's sticky queue to time out.
        heard = asyncio.create_task(self._catch_up(given, controls)) if info.attempt > 1 else None
        try:
            for _ in range(3):  # judged again when the thread moved between our look and our lease
                thread = await self._thread(given.thread_id)
                if _served(thread, given.after_flow, served_flow):
                    await self._repair_stream(thread.id)  # served by an attempt that died before reporting
                    return _outcome(given.request_id, thread)
                judged = await self._judge(thread)
                outcome = await self._attempt(given, thread, judged, controls)
                if outcome is not None:
                    return outcome
            raise ApplicationError(f"thread {given.thread_id} kept moving under this attempt", type="ThreadMoved")
        finally:
            beat.cancel()
            if heard is not None:
                heard.cancel()

    async def _catch_up(self, given: ExecutionInput, controls: Controls) -> None:
        """Apply to the attempt (running, or about to start with `controls`) what the workflow recorded."""
        found = await self.controls(given)
        execution = self.runtime.live.get(given.thread_id)
        if found.forced is not None and found.forced != given.forced:
            controls.forced = found.forced
            if execution is not None:
                _apply(execution, "force_turn", found.forced, None)
        if found.stop is not None and given.stop is None:
            controls.stop = found.stop
            if execution is not None:
                _apply(execution, "stop", None, found.stop)

    async def _attempt(
        self, given: ExecutionInput, thread: ThreadRecord, judged: _Judged, controls: Controls
    ) -> Outcome | None:
        task = asyncio.create_task(self._run(given, thread, judged, controls))
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                details = activity.cancellation_details()
                if task.done() or details is None or not details.cancel_requested:
                    why, attempt = _why(details), activity.info().attempt
                    _log.warning("temporal_attempt_abandoned", thread_id=given.thread_id, attempt=attempt, why=why)
                    task.cancel()  # worker shutting down or the attempt timed out: the next attempt takes over
                    await asyncio.gather(task, return_exceptions=True)
                    raise
                reason = (await self.controls(given)).stop or "stopped"
                controls.stop = reason
                execution = self.runtime.live.get(given.thread_id)
                if execution is not None:
                    execution.stop(reason)  # the execution stores its own end; we report it

    async def _run(
        self, given: ExecutionInput, thread: ThreadRecord, judged: _Judged, controls: Controls
    ) -> Outcome | None:
        services = self.runtime.services
        person = await self._person_message(given, thread)
        self._waiting[given.thread_id] = controls
        mine: list[ExecutionState] = []

        def started(state: ThreadState, _record: ThreadRecord) -> None:
            mine.append(self._started(given, judged, state))

        def resumed(state: ThreadState, _record: ThreadRecord) -> None:  # after our own execution: no fence
            assert state.execution is not None
            mine.append(state.execution)
            self.runtime.live.started(given.thread_id, state.execution)
            if controls.stop is not None:
                state.execution.stop(controls.stop)

        try:
            done = await execute(services, thread, person_message=person, on_start=started, resume_waiting=given.resume)
            while await simulated_approvals(services, self.runtime.waiting, done.thread):  # the agent's approver
                self.runtime.live.ended(given.thread_id, mine[-1])
                done = await execute(services, done.thread, on_start=resumed, resume_waiting=True)
            result = done.result
        except _ThreadMoved:
            return None
        except NotWaitingError:  # resumed already (an earlier request served it): nothing runs twice
            return _outcome(given.request_id, await services.storage.get_thread(given.thread_id))
        except ExecutionFailed as exc:
            record = await services.storage.get_thread(given.thread_id)
            return _outcome(given.request_id, record, error=str(exc), code="execution_failed")
        except ThreadBusyError as exc:  # the lease of an attempt that stalled has not lapsed yet
            raise ApplicationError(str(exc), type="ThreadBusy") from None
        except StaleLeaseError:
            _log.warning("temporal_lease_lost", thread_id=given.thread_id, request_id=given.request_id)
            raise
        finally:
            self._waiting.pop(given.thread_id, None)
            for execution in mine:  # only ours: an attempt refused here must not unregister the one running
                self.runtime.live.ended(given.thread_id, execution)
            with contextlib.suppress(Exception):
                await services.bus.flush(given.thread_id)
            services.bus.detach(given.thread_id)  # the next execution may run in another process
        return Outcome(given.request_id, flow_id=result.flow_id, status="done", reason=result.reason)

    def _started(self, given: ExecutionInput, judged: _Judged, state: ThreadState) -> ExecutionState:
        """Runs under the fresh lease, before anything is written: the fence against
        a slow attempt running a thread that another attempt served meanwhile."""
        execution = state.execution
        assert execution is not None
        last_seq = max((m.seq for m in execution.message_history), default=0)
        moved = execution.flow_id != judged.flow_id if judged.status == "running" else last_seq != judged.last_seq
        if moved:
            raise _ThreadMoved(given.thread_id)
        self.runtime.live.started(given.thread_id, execution)
        activity.heartbeat(execution.flow_id)
        controls = self._waiting.pop(given.thread_id, Controls())
        _apply(execution, "force_turn", controls.forced, None)
        if controls.stop is not None:
            execution.stop(controls.stop)
        return execution

    def control(self, thread_id: str, action: str, side: str | None = None, reason: str | None = None) -> None:
        """A live force-turn (or stop) heard from the broker, if the thread runs here."""
        execution = self.runtime.live.get(thread_id)
        if execution is not None:
            _apply(execution, action, side, reason)
        elif thread_id in self._waiting:
            waiting = self._waiting[thread_id]
            if action == "stop":
                waiting.stop = waiting.stop or reason or "stopped"
            elif side in ("a", "b"):
                waiting.forced = side

    async def controls(self, given: ExecutionInput) -> Controls:
        """The workflow's record of stop and force-turn for this request (falls back to the input)."""
        handle = self.client.get_workflow_handle_for(ThreadWorkflow.run, workflow_id(given.thread_id))
        try:
            async with asyncio.timeout(5):
                found = await handle.query(ThreadWorkflow.controls, given.request_id)
        except Exception as exc:
            _log.warning("temporal_controls_unavailable", thread_id=given.thread_id, error=str(exc))
            return Controls(given.stop, given.forced)
        return Controls(found.stop or given.stop, found.forced or given.forced)

    # -- helpers -------------------------------------------------------------
    async def _thread(self, thread_id: str) -> ThreadRecord:
        try:
            return await self.runtime.services.storage.get_thread(thread_id)
        except NotFoundError:
            raise ApplicationError(
                f"thread {thread_id} does not exist", type="ThreadNotFound", non_retryable=True
            ) from None

    async def _judge(self, thread: ThreadRecord) -> _Judged:
        page = await self.runtime.storage.get_messages(thread.id, limit=1, order="desc", include_silent=True)
        last = max((m.seq for m in page.messages), default=0)
        return _Judged(thread.status, thread.execution.flow_id if thread.execution is not None else None, last)

    async def _person_message(self, given: ExecutionInput, thread: ThreadRecord) -> str | None:
        """The text to send, unless a crashed attempt already stored it."""
        if given.text is None:
            return None
        if thread.status == "running" and thread.execution is not None:
            flow = thread.execution.flow_id
            recent = await self.runtime.storage.get_messages(thread.id, limit=20, order="desc", include_silent=True)
            if any(
                m.role == "user" and m.side == "b" and m.flow_id == flow and m.content == given.text
                for m in recent.messages
            ):
                return None
        return given.text

    async def _heartbeat(self, thread_id: str, flow: str | None) -> None:
        """Beats while this process's loop runs; a stalled or dead worker goes quiet."""
        while True:
            execution = self.runtime.live.get(thread_id)
            activity.heartbeat(execution.flow_id if execution is not None else flow)
            await asyncio.sleep(self.heartbeat_every)

    async def _repair_stream(self, thread_id: str) -> None:
        """The attempt that served the request may have died before its last events
        reached the stream: copy the stored tail there (stored events only; needs no lease)."""
        if self.broker is None:
            return
        try:
            await self.broker.backfill(thread_id, self.runtime.services.storage)
        except Exception as exc:  # subscribers still read the tail from the log
            _log.warning("temporal_stream_repair_failed", thread_id=thread_id, error=str(exc))


class _ThreadMoved(Exception):
    """The thread was run by someone else after this attempt judged it."""


def _apply(execution: ExecutionState, action: str, side: str | None, reason: str | None) -> None:
    if action == "stop":
        execution.stop(reason or "stopped")
    elif action == "force_turn" and (chosen := _side(side)) is not None:
        execution.force_turn(chosen)


def _side(value: str | None) -> SideName | None:
    """A side as the workflow and the broker carry it (plain strings), or None when it names none."""
    return "a" if value == "a" else "b" if value == "b" else None


def _why(details: activity.ActivityCancellationDetails | None) -> str:
    if details is None:
        return "cancelled"
    return (
        ",".join(
            name for name in ("timed_out", "not_found", "worker_shutdown", "paused", "reset") if getattr(details, name)
        )
        or "cancelled"
    )


def _served(thread: ThreadRecord, after_flow: str | None, served_flow: str | None) -> bool:
    """An execution other than the one before this request has ended: ours, by an attempt that died."""
    if thread.status == "running" or thread.execution is None:
        return False
    return thread.execution.flow_id == served_flow or thread.execution.flow_id != after_flow


def _outcome(request_id: str, thread: ThreadRecord, *, error: str | None = None, code: str | None = None) -> Outcome:
    snapshot = thread.execution
    return Outcome(
        request_id,
        flow_id=snapshot.flow_id if snapshot is not None else None,
        status=thread.status,
        reason=snapshot.reason if snapshot is not None else None,
        error=error,
        code=code,
    )
