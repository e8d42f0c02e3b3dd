"""One Temporal workflow per thread: its requests (run, send), in order.

The workflow is the durable part of a request: once the server's signal is
stored in the workflow's history, the request survives any process, and runs
on whichever worker takes it. Each request becomes one activity
(`orchestrator.execute`, see activities.py) carrying ids, never transcripts:
the activity loads the thread from storage and resumes from its last stored
step. Stop is activity cancellation, force-turn is recorded here and read by
the attempt that runs (or next runs) the execution.

The workflow stays open while the thread lives (an idle workflow costs the
Temporal server a row, and workers nothing): it is what knows which execution
came last, so a retried attempt can tell whether its request was already
served. It continues as new every `requests_per_run` requests, or sooner when
the server suggests it, far below the history limits.

Only the standard library and temporalio here: this module is loaded in the
workflow sandbox and must stay deterministic.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

__all__ = [
    "EXECUTE_ACTIVITY",
    "WORKFLOW_NAME",
    "ActivityTimeouts",
    "Controls",
    "ExecutionInput",
    "Outcome",
    "Request",
    "ThreadRun",
    "ThreadWorkflow",
    "workflow_id",
]

WORKFLOW_NAME = "orchestrator.thread"
EXECUTE_ACTIVITY = "orchestrator.execute"


def workflow_id(thread_id: str) -> str:
    """The one workflow id of a thread (one namespace per deployment: ids are per namespace)."""
    return f"orchestrator-thread-{thread_id}"


@dataclass
class Request:
    """A run (text None) or a person's message; `id` is unique per request."""

    id: str
    text: str | None = None
    stop: str | None = None  # reason, once a stop was asked while this request was queued or running
    forced: str | None = None  # side to take the next turn ("a" or "b")
    trace: dict[str, str] = field(default_factory=dict)  # W3C trace context of the caller (tracing.carrier)
    resume: bool = False  # go on with a thread whose waiting calls are all decided (engine/waiting.py)


@dataclass
class ActivityTimeouts:
    """How long an execution may go quiet (heartbeat) or last, and how it is retried."""

    heartbeat_seconds: float = 10.0
    start_to_close_seconds: float = 3600.0
    retry_initial_seconds: float = 0.5
    retry_max_seconds: float = 5.0
    max_attempts: int = 20


@dataclass
class ThreadRun:
    """The workflow's input, and what a continued-as-new run carries over."""

    thread_id: str
    last_flow: str | None = None  # the flow of the thread's last execution when this run began
    timeouts: ActivityTimeouts = field(default_factory=ActivityTimeouts)
    queue: list[Request] = field(default_factory=list)
    forced: str | None = None  # asked while idle: for the next request
    requests_per_run: int = 200


@dataclass
class ExecutionInput:
    """What the activity gets: ids and the request's controls, not the transcript."""

    thread_id: str
    request_id: str
    text: str | None
    after_flow: str | None  # the thread's last execution before this request; another one ended means served
    stop: str | None = None
    forced: str | None = None
    trace: dict[str, str] = field(default_factory=dict)  # the request's trace context: its spans join that trace
    resume: bool = False  # a waiting thread's calls were decided: resume it (NotWaitingError: nothing to do)


@dataclass
class Controls:
    stop: str | None = None
    forced: str | None = None


@dataclass
class Outcome:
    """How a request ended; `error` set when it could not be served."""

    request_id: str
    flow_id: str | None = None
    status: str | None = None
    reason: str | None = None
    error: str | None = None
    code: str | None = None  # "execution_failed" (the model) or "not_served" (gave up)


@workflow.defn(name=WORKFLOW_NAME)
class ThreadWorkflow:
    @workflow.init
    def __init__(self, start: ThreadRun) -> None:
        self._start = start
        self._queue: deque[Request] = deque(start.queue)
        self._forced = start.forced
        self._last_flow = start.last_flow
        self._current: Request | None = None
        self._activity: workflow.ActivityHandle[Outcome] | None = None
        self._waiting: set[str] = set()
        self._outcomes: dict[str, Outcome] = {}

    @workflow.run
    async def run(self, start: ThreadRun) -> None:
        served = 0
        while True:
            await workflow.wait_condition(lambda: bool(self._queue))
            request = self._queue.popleft()
            self._current = request
            outcome = await self._serve(request)
            self._current = None
            if outcome.flow_id is not None:
                self._last_flow = outcome.flow_id
            if request.id in self._waiting:
                self._outcomes[request.id] = outcome
            served += 1
            if self._long(served) and workflow.all_handlers_finished():
                workflow.continue_as_new(self._carry())

    def _long(self, served: int) -> bool:
        return served >= self._start.requests_per_run or workflow.info().is_continue_as_new_suggested()

    def _carry(self) -> ThreadRun:
        return dataclasses.replace(self._start, last_flow=self._last_flow, queue=list(self._queue), forced=self._forced)

    async def _serve(self, request: Request) -> Outcome:
        forced, self._forced = request.forced or self._forced, None
        request.forced = forced
        while True:
            given = ExecutionInput(
                self._start.thread_id,
                request.id,
                request.text,
                self._last_flow,
                request.stop,
                request.forced,
                request.trace,
                request.resume,
            )
            try:
                t = self._start.timeouts
                self._activity = workflow.start_activity(
                    EXECUTE_ACTIVITY,
                    given,
                    result_type=Outcome,
                    heartbeat_timeout=timedelta(seconds=t.heartbeat_seconds),
                    start_to_close_timeout=timedelta(seconds=t.start_to_close_seconds),
                    retry_policy=self._retry_policy(),
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
                return await self._activity
            except ActivityError as exc:
                if request.stop is not None and given.stop is None:
                    continue  # stopped before it could be applied live: the next attempt applies it
                cause = exc.cause if exc.cause is not None else exc
                workflow.logger.warning("request not served: %s", cause)
                return Outcome(request.id, error=str(cause) or type(cause).__name__, code="not_served")
            finally:
                self._activity = None

    def _retry_policy(self) -> RetryPolicy:
        t = self._start.timeouts
        return RetryPolicy(
            initial_interval=timedelta(seconds=t.retry_initial_seconds),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=t.retry_max_seconds),
            maximum_attempts=t.max_attempts,
            non_retryable_error_types=["ThreadNotFound"],
        )

    # -- requests -----------------------------------------------------------
    @workflow.signal(name="submit")
    def submit(self, request: Request) -> None:
        self._queue.append(request)

    @workflow.update  # named "submit_and_wait", after the method (the bare form keeps its result type)
    async def submit_and_wait(self, request: Request) -> Outcome:
        """Queue the request and answer when it has ended (`?wait=true`)."""
        self._waiting.add(request.id)
        self._queue.append(request)
        await workflow.wait_condition(lambda: request.id in self._outcomes)
        self._waiting.discard(request.id)
        return self._outcomes.pop(request.id)

    @workflow.signal(name="stop")
    def stop(self, reason: str) -> None:
        """Stop the running request and every one queued before this stop."""
        for request in self._queue:
            request.stop = request.stop or reason
        if self._current is not None:
            self._current.stop = self._current.stop or reason
            if self._activity is not None and not self._activity.done():
                self._activity.cancel()

    @workflow.signal(name="force_turn")
    def force_turn(self, side: str) -> None:
        if self._current is not None:
            self._current.forced = side  # the live execution hears it from the broker; a retry reads it here
        else:
            self._forced = side

    @workflow.query(name="controls")
    def controls(self, request_id: str) -> Controls:
        """The stop and force-turn asked for a request so far (read by each attempt)."""
        current = self._current
        if current is None or current.id != request_id:
            return Controls()
        return Controls(stop=current.stop, forced=current.forced)
