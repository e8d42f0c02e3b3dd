"""`Runtime` and `Thread`: the entry points a user calls from Python.

    runtime = Runtime.from_path("agents", config="configs/default.yaml")
    thread = await runtime.create_thread("support_demo")
    result = await thread.run()          # dual_ai: until the execution stops
    result = await thread.send("Hi")     # ai_human: the person's turn, then side a's

`Services` (services.py) bundles what every layer below shares, so each of
them takes one argument; `LiveExecutions` (live.py) knows which execution of a
thread runs here.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from pydantic import ValidationError

from orchestrator.core.logs import ensure_logging, register_secrets
from orchestrator.core.messages import EnvType, EnvValue, Event, MessagesResult, SideName, ThreadRecord
from orchestrator.core.results import ToolResult
from orchestrator.core.secrets import MIN_SECRET_LEN, SecretScopes
from orchestrator.core.settings import RuntimeSettings
from orchestrator.core.validation import describe
from orchestrator.core.waiting import Decision, WaitingCall
from orchestrator.definitions.define import AgentDefinition, DefinitionError, MessageArgs, ToolDefinition
from orchestrator.definitions.thread_state import ExecutionState
from orchestrator.engine import gc_policy
from orchestrator.engine.executor import Executed, ExecutionFailed, ExecutionResult, execute
from orchestrator.engine.fork import fork_thread, rewind_thread
from orchestrator.engine.hooks import Hooks
from orchestrator.engine.live import LiveExecutions, StartTicket
from orchestrator.engine.services import Services
from orchestrator.engine.state import ThreadState
from orchestrator.engine.waiting import NotWaitingError, WaitingDesk
from orchestrator.storage import Storage, open_storage
from orchestrator.storage.base import ThreadBusyError
from orchestrator.storage.events import EventBus
from orchestrator.storage.lease import Heartbeat
from orchestrator.storage.owners import process_owner

if TYPE_CHECKING:
    from orchestrator.definitions.loader import Definitions
    from orchestrator.mcp import McpTools
    from orchestrator.storage.broker import RedisBroker
    from providers.client import ModelClient
    from providers.config import ProvidersConfig

__all__ = ["ExecutionFailed", "ExecutionResult", "Runtime", "Services", "Thread"]


class Runtime:
    def __init__(
        self,
        definitions: Definitions,
        *,
        config: ProvidersConfig,
        storage: Storage,
        settings: RuntimeSettings | None = None,
        client: ModelClient | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.definitions = definitions
        self.clock = clock  # waiting calls' request and expiry times
        self.config = config
        self.settings = settings or RuntimeSettings()
        self.storage = storage
        self._client = client
        self._services: Services | None = None
        self._open_lock = asyncio.Lock()
        self.live = LiveExecutions()  # which execution of a thread runs here; controls said before it does
        self._tasks: set[asyncio.Task[Any]] = set()  # executions start() began; close() waits for them
        self._inline: dict[asyncio.Future[None], asyncio.Task[Any]] = {}  # run()/send() executions: end -> caller
        self._broker: RedisBroker | None = None  # when settings.redis is set

    @classmethod
    def from_path(
        cls,
        path: str | Path = "agents",
        *,
        config: str | Path | Sequence[str | Path] | ProvidersConfig = "configs/default.yaml",
        storage: str | Storage | None = None,
        settings: RuntimeSettings | None = None,
        model: str | None = None,
    ) -> Runtime:
        """Load definitions and config now (errors surface here); storage opens on first use.

        `model` runs every prompt on that alias, or on an offline model: `test`,
        a script file or `module:function` (see `providers.offline`)."""
        from orchestrator.definitions.loader import load_definitions
        from providers.config import ProvidersConfig, load_config

        definitions = load_definitions(path)
        if isinstance(config, ProvidersConfig):
            providers_config = config
        else:
            paths = [config] if isinstance(config, (str, Path)) else list(config)
            providers_config = load_config(*paths)
        settings = settings or _settings_from(providers_config)
        if model is not None:
            if model not in providers_config.models:
                providers_config.add_offline_model(model)
            providers_config.model_info(model)
            settings = settings.model_copy(update={"model": model})
        store = open_storage(storage or settings.storage) if not isinstance(storage, Storage) else storage
        return cls(definitions, config=providers_config, storage=store, settings=settings)

    # -- lifecycle ---------------------------------------------------------
    async def open(self) -> Runtime:
        async with self._open_lock:
            if self._services is None:
                self._check_models()
                ensure_logging()
                if self.settings.gc_freeze:
                    gc_policy.freeze_heap_once()
                broker = await self._open_broker()  # first: an unreachable Redis fails this open and the next
                try:
                    await self.storage.open()
                except BaseException:
                    if broker is not None:
                        await broker.close()
                    raise
                from orchestrator.sandbox import configure as configure_sandbox  # light: the engines load on first run

                configure_sandbox(self.settings.sandbox)  # process-wide: the last runtime opened sets it
                redactor = SecretScopes(_config_secrets(self.config))
                register_secrets(redactor)
                client = self._client
                if client is None:
                    from providers.client import ModelClient

                    client = ModelClient(self.config)
                services = Services(
                    definitions=self.definitions,
                    storage=self.storage,
                    bus=EventBus(self.storage, redactor),
                    hooks=Hooks(self.definitions.hooks),
                    client=client,
                    settings=self.settings,
                    redactor=redactor,
                    runtime_env={k: EnvValue(name=k, value=v, type="text") for k, v in self.settings.env.items()},
                    owner=process_owner(),
                    heartbeat=Heartbeat(self.storage),
                    mcp=_mcp_tools(self.config, redactor),
                    clock=self.clock,
                )
                if broker is not None:
                    services.bus.use_broker(broker)
                self._broker, self._services = broker, services  # open only once everything is
        return self

    async def _open_broker(self) -> RedisBroker | None:
        if not self.settings.redis:
            return None
        from orchestrator.storage.broker import RedisBroker

        return await RedisBroker(self.settings.redis).open()

    async def close(self, timeout: float = 30.0) -> None:
        """Stop the executions started here, wait for each to store its end
        (cancel those still running after `timeout` seconds), then close storage."""
        if self._services is not None:
            await self._stop_executions(timeout)
            await self._services.bus.close()
            if self._services.mcp is not None:
                await self._services.mcp.close()
            if self._broker is not None:
                await self._broker.close()
                self._broker = None
            await self.storage.close()
            self._services = None

    def stop_all(self, reason: str) -> None:
        """Stop every execution running here, and every one still being started
        (it ends before its first model request); `stopped_by` is "caller"."""
        self.live.stop_all(reason)

    async def _stop_executions(self, timeout: float) -> None:
        self.stop_all("runtime closed")
        current = asyncio.current_task()
        ends: set[asyncio.Future[Any]] = {t for t in self._tasks if t is not current}
        ends |= {end for end, caller in self._inline.items() if caller is not current}
        if not ends:
            return
        _, late = await asyncio.wait(ends, timeout=timeout)
        for end in late:  # still busy after its stop (a tool or hook that ignores it): cancel the task running it
            self._inline.get(end, end).cancel()
        if late:
            await asyncio.wait(late)

    async def __aenter__(self) -> Runtime:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def services(self) -> Services:
        if self._services is None:
            raise RuntimeError("Runtime is not open: use `async with runtime:` or `await runtime.open()`")
        return self._services

    def _check_models(self) -> None:
        """Every prompt's model alias exists, and provider tools match their model's provider."""
        from orchestrator.model_checks import model_problems

        problems = model_problems(self.definitions, self.config, override=self.settings.model)
        if problems:
            count = len(problems)
            raise DefinitionError(
                "\n".join(
                    [
                        f"{count} prompt{'s' if count != 1 else ''} cannot run on their model:",
                        *(str(p) for p in problems),
                    ]
                )
            )

    # -- threads -----------------------------------------------------------
    async def create_thread(
        self,
        agent: str,
        arguments: dict[str, Any] | None = None,
        user_id: str | None = None,
        *,
        thread_id: str | None = None,
    ) -> Thread:
        """A new thread of `agent`. `thread_id`: the id a protocol client chose (an AG-UI `threadId`);
        storage refuses one that exists (StorageError). Default: a fresh `thr_...` id."""
        await self.open()
        definition = self._agent(agent)
        args = _check_arguments(definition, arguments or {})
        record = ThreadRecord(agent_id=agent, user_id=user_id, arguments=args)
        if thread_id is not None:
            record.id = thread_id
        record = await self.services.bus.create_thread(record, {"agent": agent, "user_id": user_id})
        return Thread(self, record)

    async def get_thread(self, thread_id: str) -> Thread:
        await self.open()
        return Thread(self, await self.storage.get_thread(thread_id))

    async def list_threads(
        self, *, user_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[ThreadRecord]:
        await self.open()
        return await self.storage.list_threads(user_id=user_id, limit=limit, offset=offset)

    async def run(
        self,
        agent: str,
        input: str | None = None,
        *,
        arguments: dict[str, Any] | None = None,
        user_id: str | None = None,
    ) -> ExecutionResult:
        """One call: create a thread and run it (dual_ai) or send `input` (ai_human)."""
        thread = await self.create_thread(agent, arguments, user_id)
        return await (thread.send(input) if input is not None else thread.run())

    async def set_user_env(self, user_id: str, name: str, value: str, type: EnvType = "secret") -> None:
        await self.open()
        if type == "secret" and len(value) < MIN_SECRET_LEN:
            raise ValueError(
                f"set_user_env: secret value for {name!r} must be at least {MIN_SECRET_LEN} characters; "
                "store it with type 'text' if it need not be hidden"
            )
        await self.storage.set_env("user", user_id, name, value, type)  # redacted in a thread once it reads it

    @property
    def waiting(self) -> WaitingDesk:
        """Decisions on waiting calls (engine/waiting.py); `Thread.approve` and the others go through it."""
        return WaitingDesk(self.services)

    async def expire_waiting_calls(self) -> int:
        """Reject every overdue approval (`approval_timeout`) and resume the threads that leaves with
        nothing open; the number resumed. A server calls it now and then (`orchestrator serve` does)."""
        await self.open()
        resumed = 0
        for thread_id in await self.waiting.expire_due():
            resumed += await Thread(self, await self.storage.get_thread(thread_id)).resume() is not None
        return resumed

    def _agent(self, name: str) -> AgentDefinition:
        agents: dict[str, AgentDefinition] = self.definitions.agents
        if name not in agents:
            raise KeyError(f"unknown agent {name!r}; known agents: {', '.join(sorted(agents)) or 'none'}")
        return agents[name]


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
        return self._runtime._agent(self.record.agent_id)

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
        end: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runtime._inline[end] = caller
        try:
            return await self._execute(text, _Started(self, ticket, None), stop_waiting=stop_waiting)
        finally:
            ticket.settle(None)  # refused or failed before holding the lease; settled already otherwise
            del self._runtime._inline[end]
            end.set_result(None)

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
        self._runtime._tasks.add(task)
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
        if done.thread.status == "waiting" and self.agent.approver is not None:
            resumed = await self._simulated_approvals(self.agent.approver)
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

    async def _simulated_approvals(self, approver: str) -> asyncio.Task[ExecutionResult] | None:
        """The agent's approver prompt decides each open approval (engine/approver.py); the resumed
        execution's task once none is left open. Calls waiting for answers or results stay waiting."""
        from orchestrator.engine.approver import ask_approver

        prompt = self._runtime.services.definitions.prompts[approver]
        resumed = None
        for call in await self._runtime.waiting.calls(self.id):
            if call.kind != "approval":
                continue
            decision = await ask_approver(self._runtime.services, prompt, call, self.record.arguments)
            resumed = await self._decide(call.call_id, decision) or resumed
        return resumed

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
        self._runtime._tasks.add(task)
        task.add_done_callback(self._runtime._tasks.discard)
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
        self._handle._runtime._tasks.discard(task)


def _check_arguments(agent: AgentDefinition, arguments: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(arguments, dict):
        raise TypeError(f"arguments must be a dict, got {type(arguments).__name__}")
    if agent.args is not None and agent.args is not MessageArgs:  # MessageArgs: only for calls as a tool
        try:
            arguments = agent.args.model_validate(arguments).model_dump(mode="json")
        except ValidationError as exc:
            problems = describe(exc)
            raise ValueError(f"arguments for agent {agent.name!r}: {problems}") from None
    try:
        json.dumps(arguments)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"arguments must be JSON-serialisable: {exc}") from None
    return arguments


def _settings_from(config: ProvidersConfig) -> RuntimeSettings:
    raw: object = getattr(config, "runtime", None)
    if isinstance(raw, RuntimeSettings):
        return raw
    return RuntimeSettings.model_validate(raw or {})


def _mcp_tools(config: ProvidersConfig, secrets: SecretScopes) -> McpTools | None:
    """The config's MCP servers (nothing starts until a prompt that names them runs)."""
    servers = getattr(config, "mcp_servers", None)
    if not servers:
        return None
    import importlib.util

    if importlib.util.find_spec("mcp") is None or importlib.util.find_spec("jsonschema") is None:
        raise RuntimeError(
            "the config declares mcp_servers, which need the MCP SDK: pip install 'orchestrator-runtime[mcp]'"
        )
    from orchestrator.mcp import McpTools

    # stderr is the operator's log; the credentials in a server's env and headers are process-wide secrets
    return McpTools(servers, lambda text: secrets.everywhere().text(text), secrets.add)


def _config_secrets(config: ProvidersConfig) -> list[str]:
    """API keys the config resolves from the environment (for redaction)."""
    secrets: list[str] = []
    for provider in getattr(config, "providers", {}).values():
        ref = getattr(provider, "api_key", None)
        if isinstance(ref, str) and ref.startswith("${") and ref.endswith("}"):
            value = os.environ.get(ref[2:-1])
            if value:
                secrets.append(value)
    return secrets


_Out = TypeVar("_Out")


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
