"""A worker: a Temporal worker that runs threads' executions.

Any number of worker processes, on any machines, share one Temporal namespace
and task queue, one PostgreSQL and one Redis. Each runs the thread workflows
(orchestrator/temporal/workflow.py: cheap bookkeeping, cached per worker) and
up to `concurrency` executions (orchestrator/temporal/activities.py), each
under its thread's lease. What happens when things go wrong:

- the worker dies or stalls: its heartbeats stop; after the heartbeat timeout
  Temporal gives the attempt to another worker, whose executor waits out the
  lease if it has not lapsed yet and resumes from the last stored step; the
  stale worker's late commits are refused (StaleLeaseError);
- the model fails for good (ExecutionFailed): the request ends as failed;
- anything else: Temporal retries the attempt with backoff, up to the
  request's `max_attempts`.

Stop reaches a running execution as activity cancellation; force-turn as a
message on the broker's control channel (and, durably, in the workflow, where
the attempt that next runs the thread reads it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog
from temporalio.worker import Worker as _TemporalWorker
from temporalio.worker.workflow_sandbox import (
    SandboxedWorkflowRunner,
    SandboxRestrictions,
)

from orchestrator.temporal.activities import ExecutionActivities
from orchestrator.temporal.client import TemporalOptions, connect
from orchestrator.temporal.workflow import ThreadWorkflow

if TYPE_CHECKING:
    from temporalio.client import Client

    from orchestrator.runtime import Runtime
    from orchestrator.storage.broker import RedisBroker

__all__ = ["Worker"]

_log = structlog.get_logger("orchestrator.temporal.worker")


class Worker:
    def __init__(
        self,
        runtime: Runtime,
        options: TemporalOptions,
        *,
        broker: RedisBroker | None = None,
        concurrency: int = 8,
        drain_timeout: float = 30.0,
        sticky_timeout: float = 10.0,
        client: Client | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.runtime = runtime
        self.options = options
        self.broker = broker
        self.concurrency = concurrency
        self.drain_timeout = drain_timeout
        self.sticky_timeout = sticky_timeout
        self._client = client
        self.name = ""

    async def start(self) -> None:
        """Open the runtime, the broker and the Temporal connection (before `run`)."""
        import litellm  # noqa: F401  (imported now, not in the first execution: seconds without heartbeats)

        await self.runtime.open()
        self.name = self.runtime.services.owner
        if self.broker is not None:
            await self.broker.open()
            self.runtime.services.bus.use_broker(self.broker)
        if self._client is None:
            self._client = await connect(self.options)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until `stop` is set; then let running executions finish (up to `drain_timeout`);
        those still running are handed back to Temporal for another worker."""
        stop = stop or asyncio.Event()
        await self.start()
        assert self._client is not None
        beat = min(1.0, self.options.heartbeat_timeout / 4)  # heartbeats (and so cancellations) at least this often
        activities = ExecutionActivities(self.runtime, self._client, self.broker, heartbeat_every=beat)
        sandbox = SandboxRestrictions.default.with_passthrough_modules("orchestrator", "providers")
        worker = _TemporalWorker(
            self._client,
            task_queue=self.options.task_queue,
            workflows=[ThreadWorkflow],
            activities=[activities.execute],
            max_concurrent_activities=self.concurrency,
            graceful_shutdown_timeout=timedelta(seconds=self.drain_timeout),
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=self.sticky_timeout),
            max_heartbeat_throttle_interval=timedelta(seconds=beat),
            default_heartbeat_throttle_interval=timedelta(seconds=beat),
            workflow_runner=SandboxedWorkflowRunner(restrictions=sandbox),
        )
        helpers = []
        if self.broker is not None:
            ready = asyncio.Event()
            helpers.append(asyncio.create_task(self._control_loop(activities, ready)))
            await asyncio.wait_for(ready.wait(), 10)
        _log.info("worker_started", worker=self.name, concurrency=self.concurrency, task_queue=self.options.task_queue)
        running = asyncio.create_task(worker.run())
        try:
            await _first(running, stop.wait())
        finally:
            for helper in helpers:
                helper.cancel()
            if not running.done():
                await worker.shutdown()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            _log.info("worker_stopped", worker=self.name)

    async def _control_loop(self, activities: ExecutionActivities, ready: asyncio.Event) -> None:
        assert self.broker is not None
        while True:
            try:
                async for message in self.broker.control_messages(ready):
                    activities.control(message.thread_id, message.action, message.side, message.reason)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis blip: resubscribe
                _log.warning("worker_control_failed", worker=self.name, error=str(exc))
                ready.set()
                await asyncio.sleep(1)


async def _first(*aws: Awaitable[object]) -> None:
    """Wait until the first of `aws` finishes; cancel the others that this call created."""
    tasks = [a if isinstance(a, asyncio.Task) else asyncio.ensure_future(a) for a in aws]
    created = [t for t, a in zip(tasks, aws, strict=True) if t is not a]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in created:
            task.cancel()
        await asyncio.gather(*created, return_exceptions=True)
