"""The runtime's `ThreadState`: what tools and hooks see, over the runtime's services for one thread.

It implements the interface of `orchestrator.definitions.thread_state.ThreadState` (the public
`orchestrator.ThreadState`, which tool authors annotate with). A tool receives its own copy bound to
its call (`_bind_call`), which is how `queue_tool` and `invoke_tool` know the calling tool's `uses`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.core.event_payloads import EmittedEventName
from orchestrator.core.event_types import BUILTIN_EVENT_TYPES, check_payload
from orchestrator.core.messages import (
    EnvType,
    Message,
    MessagesResult,
    ThreadRecord,
)
from orchestrator.core.results import ToolResult
from orchestrator.definitions.define import AgentDefinition, ToolDefinition
from orchestrator.definitions.thread_state import ExecutionState, ToolUseError
from orchestrator.definitions.variables import declared_scopes
from orchestrator.storage.env import EnvScope

if TYPE_CHECKING:
    from orchestrator.engine.services import Services
    from orchestrator.engine.waiting import CallPauses
    from orchestrator.sandbox import CodeExecution


@dataclass
class ToolCallContext:
    """The tool call a ThreadState is bound to."""

    tool: ToolDefinition
    call_id: str
    invoke: Callable[[str, dict[str, Any], ToolCallContext], Awaitable[ToolResult]]
    queue: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    chain: tuple[str, ...] = ()
    prompt_name: str | None = None
    idempotency_key: str | None = None
    invocations: int = 0  # invoke_tool calls made so far (they number their call ids)
    pauses: CallPauses | None = None  # the call's approvals, questions and deferred result (engine/waiting.py)


class ThreadState:
    """One thread as its tools and hooks see it (the SPEC's ThreadState)."""

    def __init__(
        self,
        services: Services,
        thread: ThreadRecord,
        agent: AgentDefinition,
        *,
        execution: ExecutionState | None = None,
        depth: int = 0,
    ) -> None:
        self._services = services
        self._thread = thread
        services.redactor.nest(thread.id, thread.parent_id)  # a child's secrets stay out of its parent too
        self._agent = agent
        self.execution = execution
        self.context: dict[str, Any] = {}
        self._depth = depth
        self._call: ToolCallContext | None = None

    # -- identity ----------------------------------------------------------
    @property
    def thread_id(self) -> str:
        return self._thread.id

    @property
    def agent_id(self) -> str:
        return self._thread.agent_id

    @property
    def user_id(self) -> str | None:
        return self._thread.user_id

    @property
    def created_at(self) -> float:
        return self._thread.created_at

    @property
    def arguments(self) -> Mapping[str, Any]:
        return MappingProxyType(self._thread.arguments)

    @property
    def tool_call_id(self) -> str | None:
        """The id of the tool call this state is bound to (None outside a tool)."""
        return self._call.call_id if self._call is not None else None

    @property
    def idempotency_key(self) -> str | None:
        """The running tool call's key (None outside a tool): the same each time
        this call runs, also when a call interrupted by a crash runs again after
        resume. Pass it to an API that deduplicates (payments, emails, tickets)
        to make the side effect happen once."""
        return self._call.idempotency_key if self._call else None

    async def ask(self, payload: Any) -> Any:
        """Ask the person (or any outside system) and return their answer; the thread waits meanwhile.

        The first time, the call is stored as waiting (event `question_asked` with `payload`) and the
        tool stops here: the execution ends with reason `awaiting_answer`, holding nothing. After
        `thread.answer(call_id, value)` the tool runs again *from its start*, and each `ask` returns its
        stored answer, in order (the second `ask` of the call gets the second answer), without asking
        again. So, as with `idempotency_key`: what a tool does before an `ask` may run more than once;
        do side effects after the last `ask`, or make them idempotent with `idempotency_key`. A tool
        must ask the same questions in the same order when it runs again. `payload` must be JSON."""
        call = self._call
        if call is None:
            raise ToolUseError("ask() can only be called from inside a tool")
        if call.pauses is None:
            raise ToolUseError("ask(): a tool inside a prompt called as a tool cannot wait for an answer")
        try:
            json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"ask: payload must be JSON-serialisable ({type(payload).__name__}): {exc}") from None
        return call.pauses.reach("answer", payload=payload).answer

    def _bind_call(self, call: ToolCallContext, *, depth: int | None = None) -> ThreadState:
        bound = ThreadState(
            self._services,
            self._thread,
            self._agent,
            execution=self.execution,
            depth=self._depth if depth is None else depth,
        )
        bound.context = self.context
        bound._call = call
        return bound

    def _in_prompt(self, name: str) -> ThreadState:
        """This state one prompt deeper (a prompt called as a tool), with its own
        `execution.prompt_path`: parallel calls never see each other's prompt (or env defaults)."""
        execution = self.execution._with_prompt(name) if self.execution else None
        inner = ThreadState(self._services, self._thread, self._agent, execution=execution, depth=self._depth + 1)
        inner.context = self.context
        return inner

    # -- messages ----------------------------------------------------------
    async def get_messages(
        self,
        limit: int | None = None,
        offset: int = 0,
        order: Literal["asc", "desc"] = "asc",
        include_silent: bool = False,
        max_depth: int | None = None,
    ) -> MessagesResult:
        return await self._services.storage.get_messages(
            self.thread_id, limit=limit, offset=offset, order=order, include_silent=include_silent, max_depth=max_depth
        )

    async def inject_message(
        self,
        role: Literal["user", "assistant", "system"],
        content: str,
        silent: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> Message:
        """Persist a message shown to both sides; it enters the next model request."""
        if role not in ("user", "assistant", "system"):
            raise ValueError(f"inject_message: role must be 'user', 'assistant' or 'system', got {role!r}")
        if not isinstance(content, str):
            raise TypeError(f"inject_message: content must be a string, got {type(content).__name__}")
        message = Message(
            thread_id=self.thread_id,
            role=role,
            content=content,
            silent=silent,
            metadata=dict(metadata or {}),
            depth=self._depth,
            flow_id=self.execution.flow_id if self.execution else None,
        )
        return await self._services.store_message(self, message)

    # -- definitions -------------------------------------------------------
    async def load_agent(self, name: str) -> AgentDefinition:
        agents = self._services.definitions.agents
        if name not in agents:
            raise KeyError(f"load_agent: unknown agent {name!r}; known agents: {', '.join(sorted(agents)) or 'none'}")
        agent: AgentDefinition = agents[name]  # Services.definitions is a loader.Definitions
        return agent

    # -- tools and events --------------------------------------------------
    def queue_tool(self, name: str, args: dict[str, Any]) -> None:
        """Run `name` after the current tool finishes (it must be in the tool's `uses`)."""
        call = self._require_call("queue_tool", name)
        call.queue.append((name, dict(args)))

    async def invoke_tool(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Run `name` now and return its result (it must be in the tool's `uses`)."""
        call = self._require_call("invoke_tool", name)
        return await call.invoke(name, dict(args), call)

    def _require_call(self, what: str, name: str) -> ToolCallContext:
        call = self._call
        if call is None:
            raise ToolUseError(f"{what}({name!r}) can only be called from inside a tool")
        if name not in call.tool.uses:
            raise ToolUseError(
                f"{what}: tool {call.tool.name!r} may not call {name!r}; "
                f"add it to the tool's uses (now: {', '.join(call.tool.uses) or 'empty'})"
            )
        return call

    def emit(self, event: str, data: Any = None) -> None:
        """Send a custom event to subscribers (and the thread's event log). Under a built-in event's
        name (`tool_progress`, say) the data must have that event's shape: clients rely on it."""
        if not isinstance(event, str) or not event:
            raise ValueError(f"emit: event must be a non-empty string, got {event!r}")
        if event in BUILTIN_EVENT_TYPES:
            try:
                check_payload(self.thread_id, event, data)
            except ValueError as exc:
                raise ValueError(f"emit: {event!r} is a built-in event and its data does not fit it: {exc}") from None
        try:
            lease = self.execution.lease_token if self.execution else None
            self._services.bus.publish(self.thread_id, EmittedEventName(event), data, lease=lease)
        except ValueError as exc:  # a payload the event log cannot hold
            raise ValueError(f"emit: {exc}") from None

    # -- durable key-value store -------------------------------------------
    async def get_value(self, key: str) -> Any | None:
        return await self._services.storage.get_value(self.thread_id, key)

    async def set_value(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"set_value: key must be a non-empty string, got {key!r}")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"set_value: value for key {key!r} is not JSON-serialisable ({type(value).__name__}): {exc}"
            ) from None
        await self._services.storage.set_value(self.thread_id, key, value)

    # -- env ---------------------------------------------------------------
    def _env_scope(self) -> EnvScope:
        defs = self._services.definitions
        prompt_name = self._current_prompt_name()
        prompt = defs.prompts.get(prompt_name) if prompt_name else None
        return EnvScope(
            storage=self._services.storage,
            thread_id=self.thread_id,
            user_id=self.user_id,
            agent_name=self.agent_id,
            agent_env=self._agent.env,
            prompt_name=prompt_name,
            prompt_env=prompt.env if prompt else {},
            runtime_env=self._services.runtime_env,
            declared=declared_scopes(defs.tools),  # which names are the operator's (a short walk)
        )

    def _current_prompt_name(self) -> str | None:
        if self._call and self._call.prompt_name:
            return self._call.prompt_name
        if self.execution and self.execution.prompt_path:
            return self.execution.prompt_path[-1]
        return None

    async def env(self, name: str) -> str:
        value, shared = await self._env_scope().resolve(name)
        if value.type == "secret":  # the process's own secrets are redacted everywhere, the rest in this thread
            self._services.redactor.add(value.value, None if shared else self.thread_id)
        return value.value

    async def env_type(self, name: str) -> EnvType:
        return (await self._env_scope().lookup(name)).type

    async def set_env(self, name: str, value: str, type: EnvType | None = None) -> None:
        """Store a value on this thread. Raises `EnvWriteRefused` for the operator's names (a tool's
        operator-only variables, names the operator configured): a thread never shadows them."""
        stored = await self._env_scope().set(name, value, type)
        if stored.type == "secret":
            self._services.redactor.add(value, self.thread_id)

    # -- sandbox -----------------------------------------------------------
    def run_code(self, source: str, **options: Any) -> CodeExecution:
        """Run code in a sandbox; the thread's abort signal aborts it too."""
        from orchestrator.sandbox import run_code

        if self.execution is not None and "abort_signal" not in options:
            options["abort_signal"] = self.execution.abort_signal
        return run_code(source, **options)


# The runtime's ways to derive a tool's or a nested prompt's state: functions, not
# ThreadState methods, so they stay out of what tools and hooks see on `state`.
def bind_call(state: ThreadState, call: ToolCallContext) -> ThreadState:
    """`state` bound to one tool call (its `uses`, queue and idempotency key)."""
    return state._bind_call(call)


def in_prompt(state: ThreadState, name: str) -> ThreadState:
    """`state` one prompt deeper, with its own prompt path (see `ThreadState._in_prompt`)."""
    return state._in_prompt(name)
