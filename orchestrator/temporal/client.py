"""The server's side: put requests to a thread's workflow, durably.

Every call returns once Temporal has stored the request (a signal in the
workflow's history) or raises `TemporalUnavailable`; nothing is answered
before that. `submit_and_wait` is update-with-start: it returns when the
request's execution has ended.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateStage
from temporalio.common import WorkflowIDConflictPolicy

from orchestrator.core import tracing
from orchestrator.temporal.workflow import ActivityTimeouts, Outcome, Request, ThreadRun, ThreadWorkflow, workflow_id

__all__ = ["TemporalOptions", "TemporalUnavailable", "ThreadRequests", "connect"]


class TemporalOptions(BaseModel):
    """Where the Temporal service is and how executions time out (shared by servers and workers)."""

    model_config = ConfigDict(extra="forbid")

    address: str = Field(
        description="host:port of the Temporal frontend (a cluster, Cloud, or `temporal server start-dev`)."
    )
    namespace: str = "default"
    task_queue: str = "orchestrator"
    heartbeat_timeout: float = Field(
        default=10.0, gt=0, description="Seconds without a heartbeat before an attempt is given to another worker."
    )
    start_to_close_timeout: float = Field(default=3600.0, gt=0, description="Longest one execution attempt may run.")
    max_attempts: int = Field(default=20, ge=1, description="Attempts of one request before it is reported not served.")
    retry_initial: float = Field(default=0.5, gt=0)
    retry_max: float = Field(default=5.0, gt=0)
    requests_per_run: int = Field(
        default=200, ge=1, description="Requests a workflow run serves before it continues as new."
    )

    def timeouts(self) -> ActivityTimeouts:
        return ActivityTimeouts(
            heartbeat_seconds=self.heartbeat_timeout,
            start_to_close_seconds=self.start_to_close_timeout,
            retry_initial_seconds=self.retry_initial,
            retry_max_seconds=self.retry_max,
            max_attempts=self.max_attempts,
        )


class TemporalUnavailable(RuntimeError):
    """Temporal did not take the request (unreachable, or refused it): nothing was queued."""


async def connect(options: TemporalOptions) -> Client:
    try:
        return await Client.connect(options.address, namespace=options.namespace)
    except Exception as exc:
        raise TemporalUnavailable(f"Temporal at {options.address} (namespace {options.namespace}): {exc}") from exc


class ThreadRequests:
    """Requests to threads' workflows, through one client."""

    def __init__(self, client: Client, options: TemporalOptions) -> None:
        self.client = client
        self.options = options

    def _start(self, thread_id: str, last_flow: str | None) -> ThreadRun:
        return ThreadRun(
            thread_id,
            last_flow=last_flow,
            timeouts=self.options.timeouts(),
            requests_per_run=self.options.requests_per_run,
        )

    async def submit(self, thread_id: str, text: str | None, *, last_flow: str | None, resume: bool = False) -> str:
        """Queue a run (text None) or a person's message; returns the request id once stored.
        `last_flow`: the thread's last execution as the caller sees it (used only if this starts the workflow).
        `resume`: the thread's waiting calls are decided, go on with it (a workflow waiting for this held
        no activity while the thread waited)."""
        request = Request(id=_request_id(), text=text, trace=tracing.carrier(), resume=resume)
        await self._signal_with_start(
            thread_id, last_flow, "submit", request, f"queue the request for thread {thread_id}"
        )
        return request.id

    async def submit_and_wait(
        self, thread_id: str, text: str | None, *, last_flow: str | None, timeout: float | None = None
    ) -> Outcome:
        request = Request(id=_request_id(), text=text, trace=tracing.carrier())
        start = WithStartWorkflowOperation(
            ThreadWorkflow.run,
            self._start(thread_id, last_flow),
            id=workflow_id(thread_id),
            task_queue=self.options.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        try:
            handle = await self.client.start_update_with_start_workflow(
                ThreadWorkflow.submit_and_wait,
                request,
                start_workflow_operation=start,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            )
        except Exception as exc:
            raise TemporalUnavailable(f"could not queue the request for thread {thread_id}: {exc}") from exc
        return await handle.result(rpc_timeout=timedelta(seconds=timeout) if timeout else None)

    async def stop(self, thread_id: str, reason: str) -> bool:
        """Stop the thread's running and queued requests; False when it has no workflow."""
        return await self._signal(thread_id, "stop", reason)

    async def force_turn(self, thread_id: str, side: str, *, last_flow: str | None) -> None:
        """Give `side` the next turn: of the running execution, or of the next one."""
        await self._signal_with_start(
            thread_id, last_flow, "force_turn", side, f"deliver force-turn to thread {thread_id}"
        )

    async def _signal_with_start(
        self, thread_id: str, last_flow: str | None, signal: str, arg: Request | str, doing: str
    ) -> None:
        """Signal the thread's workflow, starting it first if it is not running."""
        try:
            await self.client.start_workflow(
                ThreadWorkflow.run,
                self._start(thread_id, last_flow),
                id=workflow_id(thread_id),
                task_queue=self.options.task_queue,
                start_signal=signal,
                start_signal_args=[arg],
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
        except Exception as exc:
            raise TemporalUnavailable(f"could not {doing}: {exc}") from exc

    async def _signal(self, thread_id: str, name: str, arg: str) -> bool:
        from temporalio.service import RPCError, RPCStatusCode

        try:
            await self.client.get_workflow_handle(workflow_id(thread_id)).signal(name, arg)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise TemporalUnavailable(f"could not deliver {name} to thread {thread_id}: {exc}") from exc
        except Exception as exc:
            raise TemporalUnavailable(f"could not deliver {name} to thread {thread_id}: {exc}") from exc
        return True


def _request_id() -> str:
    return f"req_{uuid.uuid4().hex}"
