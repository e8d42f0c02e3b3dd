"""`Thread`: a handle on one thread of a `Runtime` (runtime.py), what a program holds to talk to it.

    thread = await runtime.create_thread("support_demo")
    result = await thread.run()          # dual_ai: until the execution stops
    result = await thread.send("Hi")     # ai_human: the person's turn, then side a's
    await thread.approve(call_id)        # a call waiting for the outside (engine/waiting.py)

Cheap to create: the state lives in storage; the runtime runs the executions and waits for them at close.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from orchestrator.core.messages import Event, MessagesResult, SideName, ThreadRecord
from orchestrator.core.results import ToolResult
from orchestrator.core.waiting import Decision, WaitingCall
from orchestrator.definitions.define import AgentDefinition, ToolDefinition
from orchestrator.definitions.thread_state import ExecutionState
from orchestrator.engine.approver import simulated_approvals
from orchestrator.engine.executor import Executed, ExecutionResult, execute
from orchestrator.engine.fork import fork_thread, rewind_thread
from orchestrator.engine.live import StartTicket
from orchestrator.engine.state import ThreadState
from orchestrator.engine.waiting import NotWaitingError
from orchestrator.storage.base import ThreadBusyError

if TYPE_CHECKING:
    from orchestrator.runtime import Runtime

__all__ = ["Thread"]

_Out = TypeVar("_Out")  # a typed answer's type (`output=Model`)


class Thread:
    """A handle on one thread. Cheap to create; the state lives in storage."""

    def __init__(self, runtime: Runtime, record: ThreadRecord) -> None:
        self._runtime = runtime
        self.record = record

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def agent(self) -> AgentDefinition:
        return self._runtime.agent(self.record.agent_id)

    @property
    def execution(self) -> ExecutionState | None:
        return self._runtime.live.get(self.id)

    @property
    def state(self) -> ThreadState:
        services = self._runtime.services
        return ThreadState(services, self.record, self.agent, execution=self.execution)

    # run(), send() and start() are plain functions returning a coroutine: the call
    # itself announces the start, so a stop said right after it (before the
    # coroutine first runs) is kept and ends the execution before its first request.
    # `output=Model` (side a's prompt's output type): the result's `output` is checked to be one and typed so.
    @overload
    def run(self) -> Coroutine[Any, Any, ExecutionResult]: ...
    @overload
    def run(self, *, output: type[_Out]) -> Coroutine[Any, Any, ExecutionResult[_Out]]: ...
    def run(self, *, output: type[_Out] | None = None) -> Coroutine[Any, Any, ExecutionResult[Any]]:
        """Run a dual_ai thread until its execution stops."""
        ticket = self._runtime.live.announce(self.id)
        return _typed(ticket.watch(self._to_end(None, ticket)), output)

    @overload
    def send(self, text: str) -> Coroutine[Any, Any, ExecutionResult]: ...
    @overload
    def send(self, text: str, *, output: type[_Out]) -> Coroutine[Any, Any, ExecutionResult[_Out]]: ...
    def send(self, text: str, *, output: type[_Out] | None = None) -> Coroutine[Any, Any, ExecutionResult[Any]]:
        """The person's message (side b), then side a's turn."""
        ticket = self._runtime.live.announce(self.id)
        return _typed(ticket.watch(self._to_end(text, ticket)), output)

    def start(
        self, text: str | None = None, *, tools: Sequence[ToolDefinition] = ()
    ) -> Coroutine[Any, Any, asyncio.Task[ExecutionResult]]:
        """Start an execution in the background; returns once it owns the thread.

        Raises ThreadBusyError (or a bad-input error) right away instead of
        through the task, so a server can answer 409 before it answers 202. `tools`: a client's tools
        for this execution only (engine/client_tools.py: deferred, their results come from the client)."""
        ticket = self._runtime.live.announce(self.id)
        return ticket.watch(self._start(text, ticket, tools=tools))

    async def _to_end(
        self, text: str | None, ticket: StartTicket, *, stop_waiting: str | None = None
    ) -> ExecutionResult:
        """run() and send(): the execution runs in the caller's task, not a task of its own (which would be
        two more tasks per execution, one held while it runs); close() waits for its end all the same."""
        await self._ready(text, ticket, check=stop_waiting is None)
        caller = asyncio.current_task()
        assert caller is not None
        with self._runtime.inline(caller):
            try:
                return await self._execute(text, _Started(self, ticket, None), stop_waiting=stop_waiting)
            finally:
                ticket.settle(None)  # refused or failed before holding the lease; settled already otherwise

    async def _ready(self, text: str | None, ticket: StartTicket, *, check: bool = True) -> None:
        ticket.running()
        try:
            if check:  # a resume goes on with the thread's own turn, whatever its kind
                self._check_kind(text)
            await self._runtime.open()
        except BaseException:
            ticket.settle(None)
            raise

    async def _start(
        self,
        text: str | None,
        ticket: StartTicket,
        *,
        mode: Literal["start", "resume"] = "start",
        tools: Sequence[ToolDefinition] = (),
    ) -> asyncio.Task[ExecutionResult]:
        await self._ready(text, ticket, check=mode == "start")
        started = asyncio.Event()
        on_start = _Started(self, ticket, started)
        task = asyncio.create_task(self._execute(text, on_start, resume=mode == "resume", tools=tools))
        task.add_done_callback(on_start.done)  # one callback: each copies the caller's context
        self._runtime.keep(task)
        waiter = asyncio.create_task(started.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done() and not started.is_set():
            task.result()  # raises ThreadBusyError and other early failures
        return task

    def _check_kind(self, text: str | None) -> None:
        kind = self.agent.type
        if text is None and kind != "dual_ai":
            raise TypeError(
                f"thread {self.id} runs ai_human agent {self.record.agent_id!r}: use send(text) for the person's turn"
            )
        if text is not None and kind != "ai_human":
            raise TypeError(f"thread {self.id} runs dual_ai agent {self.record.agent_id!r}: use run()")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise ValueError("send: text must be a non-empty string")

    async def _execute(
        self,
        person_message: str | None,
        started: _Started,
        *,
        resume: bool = False,
        stop_waiting: str | None = None,
        tools: Sequence[ToolDefinition] = (),
    ) -> ExecutionResult:
        done: Executed | None = None
        try:
            done = await execute(
                self._runtime.services,
                self.record,
                person_message=person_message,
                on_start=started,
                resume_waiting=resume,
                stop_waiting=stop_waiting,
                client_tools=tools,
            )
        finally:
            if started.execution is not None:
                self._runtime.live.ended(self.id, started.execution)
            if done is None:  # failed or cancelled: the record is what storage kept
                self.record = await self._runtime.storage.get_thread(self.id)
        self.record = done.thread
        if await simulated_approvals(self._runtime.services, self._runtime.waiting, done.thread):
            resumed = await self.resume(tools=tools)
            if resumed is not None:
                return await resumed
        if done.thread.status == "waiting" and not await self._runtime.waiting.calls(self.id):
            await self.resume(tools=tools)  # decided while the step's other calls ran, its resume refused: go on now
        return done.result

    # -- calls waiting for the outside (engine/waiting.py, docs/guide.md) --------
    async def waiting_calls(self, *, include_decided: bool = False) -> list[WaitingCall]:
        """The thread's calls waiting for an approval, a result or an answer (overdue approvals are
        rejected first, which may resume the thread)."""
        await self._runtime.open()
        if await self._runtime.waiting.expire_thread(self.id):
            await self.resume()
        return await self._runtime.waiting.calls(self.id, open_only=not include_decided)

    async def approve(self, call_id: str, args: dict[str, Any] | None = None) -> asyncio.Task[ExecutionResult] | None:
        """Let the waiting call run, with `args` instead of the model's when given (checked against the
        tool's schema: WaitingCallError naming the fields, nothing stored). Once no call of the thread is
        left waiting, the thread resumes: the task of that execution, else None."""
        if args is not None and not isinstance(args, dict):
            raise TypeError(f"approve: args must be a dict of the tool's arguments or None, got {type(args).__name__}")
        return await self._decide(call_id, Decision(kind="approved", arguments=args))

    async def reject(self, call_id: str, reason: str) -> asyncio.Task[ExecutionResult] | None:
        """Refuse the waiting call: the model gets an error result carrying `reason`."""
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("reject: reason must be a non-empty string (the model reads it)")
        return await self._decide(call_id, Decision(kind="rejected", reason=reason))

    async def submit_result(
        self, call_id: str, result: ToolResult | str, *, tools: Sequence[ToolDefinition] = ()
    ) -> asyncio.Task[ExecutionResult] | None:
        """The result of a deferred call (a string is a success with that text). `tools`: the client's
        tools for the execution this may resume (as `start`'s)."""
        if isinstance(result, str):
            result = ToolResult.ok(result)
        if not isinstance(result, ToolResult):
            raise TypeError(f"submit_result: result must be a ToolResult or a str, got {type(result).__name__}")
        return await self._decide(call_id, Decision(kind="result", result=result), tools=tools)

    async def answer(self, call_id: str, value: Any) -> asyncio.Task[ExecutionResult] | None:
        """The answer to the question the call asked (`state.ask`); `value` must be JSON."""
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"answer: value must be JSON-serialisable ({type(value).__name__}): {exc}") from None
        return await self._decide(call_id, Decision(kind="answer", answer=value))

    async def _decide(
        self, call_id: str, decision: Decision, *, tools: Sequence[ToolDefinition] = ()
    ) -> asyncio.Task[ExecutionResult] | None:
        await self._runtime.open()
        if not isinstance(call_id, str) or not call_id:
            raise ValueError(f"call_id must be a non-empty string, got {call_id!r}")
        if await self._runtime.waiting.decide(self.id, call_id, decision):
            return await self.resume(tools=tools)
        return None

    async def resume(self, *, tools: Sequence[ToolDefinition] = ()) -> asyncio.Task[ExecutionResult] | None:
        """Go on with a waiting thread whose calls are all decided, in the background (a decision does
        this itself). None when there is nothing to resume: it is not waiting, or another resume (or
        the execution that is ending, which checks again as it ends) holds it."""
        ticket = self._runtime.live.announce(self.id)
        try:
            return await ticket.watch(self._start(None, ticket, mode="resume", tools=tools))
        except (NotWaitingError, ThreadBusyError):
            return None

    async def stop_waiting(self, reason: str = "stopped") -> ExecutionResult | None:
        """End a waiting thread: its waiting calls are decided `stopped`, each gets a result saying so,
        and the thread is `stopped`. None when it was not waiting. `stop()` does this in the background."""
        await self._runtime.open()
        if (await self.refresh()).status != "waiting":
            return None
        await self._runtime.waiting.stop(self.id, reason)
        ticket = self._runtime.live.announce(self.id)
        try:
            return await ticket.watch(self._to_end(None, ticket, stop_waiting=reason))
        except (NotWaitingError, ThreadBusyError):
            return None

    def force_turn(self, side: SideName) -> None:
        """Give the next turn to `side` (after the current step, or at the next execution)."""
        self._runtime.live.force_turn(self.id, side)

    def stop(self, reason: str = "stopped") -> bool:
        """Stop the execution: cancels its model stream and tools (`stopped_by`
        is "caller"). Said while run()/send()/start() has been called but the
        execution does not hold the lease yet, it is kept and applied then.
        False when there is nothing to stop. A thread waiting for calls (`waiting_calls()`) is ended in
        the background (`stop_waiting`), its waiting calls answered as stopped."""
        if self._runtime.live.stop(self.id, reason):
            return True
        if self.record.status != "waiting":
            return False
        task = asyncio.get_running_loop().create_task(self.stop_waiting(reason))
        self._runtime.keep(task, until_done=True)
        return True

    async def events(self, after: int = 0) -> AsyncIterator[Event]:
        await self._runtime.open()
        async for event in self._runtime.services.bus.subscribe(self.id, after):
            yield event

    async def get_messages(
        self,
        limit: int | None = None,
        offset: int = 0,
        order: Literal["asc", "desc"] = "asc",
        include_silent: bool = False,
        max_depth: int | None = None,
        include_superseded: bool = False,
    ) -> MessagesResult:
        """As `ThreadState.get_messages`; `include_superseded`: also what a rewind left behind."""
        await self._runtime.open()
        return await self._runtime.storage.get_messages(
            self.id,
            limit=limit,
            offset=offset,
            order=order,
            include_silent=include_silent,
            max_depth=max_depth,
            include_superseded=include_superseded,
        )

    async def fork(self, at: int) -> Thread:
        """A new thread whose history is this one's up to and including message `at` (engine/fork.py)."""
        await self._runtime.open()
        return Thread(self._runtime, await fork_thread(self._runtime.services, await self.refresh(), at))

    async def rewind(self, to: int) -> int:
        """Continue from message `to`: later messages, values and events are kept, superseded; refused
        while an execution runs. Returns how many messages were superseded."""
        await self._runtime.open()
        self.record, superseded = await rewind_thread(self._runtime.services, self._runtime.live, self.id, to)
        return superseded

    async def refresh(self) -> ThreadRecord:
        self.record = await self._runtime.storage.get_thread(self.id)
        return self.record


class _Started:
    """`execute`'s `on_start` for one run, send or start: the execution holds the lease, so a stop
    kept for it applies now and the starter waiting for it wakes; and its task's one done callback.
    One slotted object where three closures and their cells were, held for the execution's length."""

    __slots__ = ("_event", "_handle", "_ticket", "execution")

    def __init__(self, handle: Thread, ticket: StartTicket, event: asyncio.Event | None) -> None:
        self._handle = handle
        self._ticket = ticket
        self._event: asyncio.Event | None = event
        self.execution: ExecutionState | None = None

    def __call__(self, state: ThreadState, record: ThreadRecord) -> None:
        assert state.execution is not None
        self.execution = state.execution
        # the record the execution keeps current: the handle shows it, and its own copy, stale from
        # here on, is not held (with its usage) for the whole execution
        self._handle.record = record
        self._handle._runtime.live.started(record.id, state.execution)  # applies a side forced at rest
        self._ticket.settle(state.execution)
        if self._event is not None:
            self._event.set()
            self._event = None  # the starter has what it waited for

    def done(self, task: asyncio.Task[ExecutionResult]) -> None:
        self._ticket.settle(None)  # refused or failed before holding the lease; settled already otherwise
        self._handle._runtime.release(task)


def _typed(
    execution: Coroutine[Any, Any, ExecutionResult], output: type[_Out] | None
) -> Coroutine[Any, Any, ExecutionResult[Any]]:
    """The execution as it is, or with its result's output checked to be an `output` (`ExecutionResult.typed`)."""
    if output is None:
        return execution

    async def checked() -> ExecutionResult[_Out]:
        result = await execution
        return result.typed(output)

    return checked()
