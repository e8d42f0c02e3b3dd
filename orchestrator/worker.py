"""A worker: takes execution requests from the queue and runs them.

Any number of worker processes, on any machines, share one PostgreSQL. Each
runs up to `concurrency` executions at once, each under its thread's lease
(`orchestrator.executor.execute` takes it, heartbeats it and fences every
commit with its token). What happens when things go wrong:

- the worker dies or stalls: its lease lapses, the queue puts the request back
  (`ExecutionQueue.reclaim`), another worker picks it and the executor resumes
  the thread from its last stored step (only tool calls without a stored result
  run again); the stale worker's late commits are refused (StaleLeaseError);
- the thread is busy (another execution holds the lease): the request waits;
- the model fails for good (ExecutionFailed): the request is marked failed;
- anything else: retried with a delay, up to the queue's `max_attempts`.

Stop and force_turn arrive on the broker's control channel and are applied to
the live `ExecutionState` of the thread, if it runs here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from .executor import ExecutionFailed, execute
from .storage import NotFoundError, StaleLeaseError, ThreadBusyError

if TYPE_CHECKING:
    from .broker import ControlMessage, RedisBroker
    from .messages import ThreadRecord
    from .queue import ExecutionQueue, ExecutionRequest
    from .runtime import Runtime
    from .state import ExecutionState, ThreadState

__all__ = ["Worker", "WorkerStats", "submit"]

_log = structlog.get_logger("orchestrator.worker")


async def submit(runtime: Runtime, queue: ExecutionQueue, thread_id: str, text: str | None = None) -> int:
    """Ask the workers to run a thread (`text`: a person's message). The API
    side's events are written out first, so the worker numbers on from them."""
    await runtime.open()
    await runtime.services.bus.flush(thread_id)
    return await queue.enqueue(thread_id, "send" if text is not None else "run", text)


@dataclass
class WorkerStats:
    picked: int = 0
    done: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0  # lease lost to another worker mid-execution
    pickup_latency: list[float] = field(default_factory=list)  # enqueue -> pick, first attempts


class Worker:
    def __init__(
        self,
        runtime: Runtime,
        queue: ExecutionQueue,
        *,
        broker: RedisBroker | None = None,
        concurrency: int = 4,
        poll_interval: float = 1.0,
        reclaim_interval: float | None = None,
        busy_delay: float = 0.5,
        retry_delay: float = 2.0,
        drain_timeout: float = 30.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.runtime = runtime
        self.queue = queue
        self.broker = broker
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.reclaim_interval = reclaim_interval
        self.busy_delay = busy_delay
        self.retry_delay = retry_delay
        self.drain_timeout = drain_timeout
        self.stats = WorkerStats()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._held: dict[str, list[ControlMessage]] = {}  # picked, not started: controls wait here
        self.name = ""

    # -- lifecycle ---------------------------------------------------------
    async def start(self) -> None:
        await self.runtime.open()
        self.name = self.runtime.services.owner
        if self.broker is not None:
            await self.broker.open()
            self.runtime.services.bus.use_broker(self.broker)
        await self.queue.open(listen=True)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Pick and run requests until `stop` is set; then let running ones finish
        (up to `drain_timeout`) and hand the rest back to the queue."""
        stop = stop or asyncio.Event()
        await self.start()
        helpers = [asyncio.create_task(self._reclaim_loop(stop))]
        if self.broker is not None:
            ready = asyncio.Event()
            helpers.append(asyncio.create_task(self._control_loop(ready)))
            await asyncio.wait_for(ready.wait(), 10)
        _log.info("worker_started", worker=self.name, concurrency=self.concurrency)
        try:
            await self._pick_loop(stop)
        finally:
            for helper in helpers:
                helper.cancel()
            await self._drain()
            _log.info("worker_stopped", worker=self.name, **{k: v for k, v in vars(self.stats).items() if k != "pickup_latency"})

    async def _pick_loop(self, stop: asyncio.Event) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        while not stop.is_set():
            await slots.acquire()
            request = await self._pick() if not stop.is_set() else None
            if request is None:
                slots.release()
                if not stop.is_set():
                    await _first(self.queue.wait_for_work(self.poll_interval), stop.wait())
                continue
            self._spawn(self._run_slot(request, slots))

    async def _pick(self) -> ExecutionRequest | None:
        try:
            request = await self.queue.pick(self.name)
        except Exception as exc:  # database unreachable: keep trying at the poll rate
            _log.warning("worker_pick_failed", worker=self.name, error=str(exc))
            return None
        if request is not None:
            self.stats.picked += 1
            if request.attempts == 1:
                self.stats.pickup_latency.append(max(0.0, time.time() - request.created_at))
        return request

    async def _run_slot(self, request: ExecutionRequest, slots: asyncio.Semaphore) -> None:
        try:
            await self.handle(request)
        except asyncio.CancelledError:  # shutting down: let another worker take it now
            with contextlib.suppress(Exception):
                await asyncio.shield(self.queue.retry(request.id, self.name, delay=0, count_attempt=False))
            raise
        except Exception:
            _log.exception("worker_request_crashed", worker=self.name, request_id=request.id)
        finally:
            slots.release()

    async def _drain(self) -> None:
        running = [t for t in self._tasks if not t.done()]
        if running:
            _, pending = await asyncio.wait(running, timeout=self.drain_timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one request -------------------------------------------------------
    async def handle(self, request: ExecutionRequest) -> None:
        """Run one picked request to its end and record the outcome in the queue."""
        for _ in range(3):  # judged again when another worker ran the thread meanwhile
            try:
                thread = await self.runtime.services.storage.get_thread(request.thread_id)
            except NotFoundError:
                await self.queue.fail(request.id, self.name, f"thread {request.thread_id} does not exist")
                return
            if _already_served(request, thread):  # an earlier attempt's execution has ended
                await self._repair_stream(thread.id)
                await self._mark(self.queue.done(request.id, self.name), "done")
                return
            if await self._execute(request, thread):
                return
            request = await self.queue.get(request.id)
        await self._mark(self.queue.retry(request.id, self.name, delay=self.busy_delay, count_attempt=False), "retried")

    async def _repair_stream(self, thread_id: str) -> None:
        """The worker that served this request died after its last commit,
        perhaps before those events reached the stream (an `execution_stopped`
        goes out only once stored): copy the stored tail there, so live clients
        get it now rather than on their next idle read of the log. Needs no
        lease: it appends stored events only, and stream ids only grow."""
        if self.broker is None:
            return
        try:
            await self.broker.backfill(thread_id, self.runtime.services.storage)
        except Exception as exc:  # subscribers still read the tail from the log
            _log.warning("worker_stream_repair_failed", worker=self.name, thread_id=thread_id, error=str(exc))

    async def _execute(self, request: ExecutionRequest, thread: ThreadRecord) -> bool:
        """False if the thread changed between our look at it and our lease (judge again)."""
        services = self.runtime.services
        thread_id = request.thread_id
        person = await self._person_message(request, thread)
        self._held[thread_id] = []
        try:
            await execute(services, thread, person_message=person, on_start=lambda state: self._started(request, thread, state))
        except _ThreadMoved:
            return False
        except ThreadBusyError:
            await self._mark(self.queue.retry(request.id, self.name, delay=self.busy_delay, count_attempt=False), "retried")
            return True
        except StaleLeaseError:
            self.stats.lost += 1  # another worker took the thread over; its run stands
            _log.warning("worker_lease_lost", worker=self.name, thread_id=thread_id, request_id=request.id)
            return True
        except ExecutionFailed as exc:
            await self._mark(self.queue.fail(request.id, self.name, str(exc)), "failed")
            return True
        except Exception as exc:
            _log.exception("worker_execution_error", worker=self.name, thread_id=thread_id, request_id=request.id)
            await self._mark(self.queue.retry(request.id, self.name, delay=self.retry_delay, error=repr(exc)), "retried")
            return True
        finally:
            self.runtime._running.pop(thread_id, None)
            self._held.pop(thread_id, None)
            with contextlib.suppress(Exception):
                await services.bus.flush(thread_id)
            services.bus.detach(thread_id)  # the next execution may run in another process
        await self._mark(self.queue.done(request.id, self.name), "done")
        return True

    def _started(self, request: ExecutionRequest, judged: ThreadRecord, state: ThreadState) -> None:
        """Runs under the fresh lease, before anything is written: the fence
        against a slow worker running a thread someone finished meanwhile."""
        if _moved(judged, state._thread):
            raise _ThreadMoved(request.thread_id)
        execution = state.execution
        assert execution is not None
        self.runtime._running[request.thread_id] = execution  # what Thread.stop() and controls reach
        for message in self._held.pop(request.thread_id, []):
            _apply(execution, message)
        self._spawn(self.queue.set_flow(request.id, execution.flow_id))

    async def _person_message(self, request: ExecutionRequest, thread: ThreadRecord) -> str | None:
        """The text to send, unless a crashed attempt already stored it."""
        if request.kind != "send":
            return None
        if thread.status == "running" and thread.execution is not None:
            flow = thread.execution.flow_id
            recent = await self.runtime.storage.get_messages(thread.id, limit=20, order="desc", include_silent=True)
            if any(m.role == "user" and m.side == "b" and m.flow_id == flow and m.content == request.text for m in recent.messages):
                return None
        return request.text

    async def _mark(self, update: Awaitable[bool], outcome: str) -> None:
        if await update:
            setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)

    # -- background duties -------------------------------------------------
    async def _reclaim_loop(self, stop: asyncio.Event) -> None:
        ttl = self.runtime.settings.lease_ttl
        interval = self.reclaim_interval or max(ttl / 2, 0.2)
        while not stop.is_set():
            await _first(asyncio.sleep(interval), stop.wait())
            try:
                await self.queue.reclaim(stale_after=ttl)
            except Exception as exc:
                _log.warning("worker_reclaim_failed", worker=self.name, error=str(exc))

    async def _control_loop(self, ready: asyncio.Event) -> None:
        assert self.broker is not None
        while True:
            try:
                async for message in self.broker.control_messages(ready):
                    self.control(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis blip: resubscribe
                _log.warning("worker_control_failed", worker=self.name, error=str(exc))
                ready.set()
                await asyncio.sleep(1)

    def control(self, message: ControlMessage) -> None:
        """Apply a stop/force_turn to the thread if it runs (or is about to run) here."""
        execution = self.runtime._running.get(message.thread_id)
        if execution is not None:
            _apply(execution, message)
        elif message.thread_id in self._held:
            self._held[message.thread_id].append(message)


def _apply(execution: ExecutionState, message: ControlMessage) -> None:
    if message.action == "stop":
        execution.stop(message.reason or "stopped")
    elif message.action == "force_turn" and message.side in ("a", "b"):
        execution.force_turn(message.side)  # type: ignore[arg-type]


class _ThreadMoved(Exception):
    """The thread was run by someone else after this worker judged the request."""


def _moved(judged: ThreadRecord, now: ThreadRecord) -> bool:
    def flow(t: ThreadRecord) -> str | None:
        return t.execution.flow_id if t.execution is not None else None

    return (judged.status, judged.updated_at, flow(judged)) != (now.status, now.updated_at, flow(now))


def _already_served(request: ExecutionRequest, thread: ThreadRecord) -> bool:
    """The request's execution started on an earlier attempt and has ended."""
    return (
        request.flow_id is not None
        and thread.execution is not None
        and thread.execution.flow_id == request.flow_id
        and thread.status != "running"
    )


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait until the first of `aws` finishes; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
