"""What a tool or a hook sees of its thread: `ThreadState` (an interface), `ExecutionState`, `AbortSignal`.

Tools are defined before anything runs, so their signatures name the interface, not the runtime's
class: `ThreadState` here is a `Protocol` with the SPEC's members, and the runtime's implementation
(`orchestrator.engine.state.ThreadState`) is what a tool receives. `ExecutionState` and `AbortSignal`
are plain values with no I/O, so they live here whole.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from orchestrator.core.messages import EnvType, ExecutionSnapshot, Message, MessagesResult, SideName, StoppedBy
from orchestrator.core.results import ToolResult

if TYPE_CHECKING:
    from orchestrator.definitions.define import AgentDefinition
    from orchestrator.sandbox import CodeExecution


class ToolUseError(ValueError):
    """queue_tool / invoke_tool named a tool the caller may not use."""


class AbortSignal:
    """Fired by `stop()` or an abort; awaited by in-flight requests and tools."""

    __slots__ = ("_callbacks", "_event", "_fired", "reason")

    def __init__(self) -> None:
        self.reason: str | None = None
        self._fired = False
        self._callbacks: list[Callable[[], object]] = []
        self._event: asyncio.Event | None = None  # made by the first wait(): most executions never wait on it

    @property
    def aborted(self) -> bool:
        return self._fired

    def abort(self, reason: str = "aborted") -> None:
        if not self._fired:
            self.reason, self._fired = reason, True
            if self._event is not None:
                self._event.set()
            for callback in list(self._callbacks):
                callback()

    def on_abort(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call `callback` when the signal fires; returns a function that unregisters it."""
        self._callbacks.append(callback)
        return lambda: self.remove(callback)

    def remove(self, callback: Callable[[], object]) -> None:
        """Unregister `callback` (one equal to it); nothing if it is not registered."""
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    async def wait(self) -> None:
        if self._fired:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()


class ExecutionState:
    """The live execution. Counters live in a durable snapshot, saved with each step."""

    def __init__(self, snapshot: ExecutionSnapshot, history: list[Message]) -> None:
        self.snapshot = snapshot
        self.message_history: list[Message] = history
        self.abort_signal = AbortSignal()
        self.prompt_path: list[str] = []
        self.lease_token: int | None = None
        self.lease_lost: str | None = None  # why the lease was lost; the execution is aborted then

    flow_id = property(lambda self: self.snapshot.flow_id)
    current_side = property(lambda self: self.snapshot.current_side)
    step_count = property(lambda self: self.snapshot.step_count)
    side_a_step_count = property(lambda self: self.snapshot.side_a_step_count)
    side_b_step_count = property(lambda self: self.snapshot.side_b_step_count)
    stopped = property(lambda self: self.snapshot.stopped)
    stopped_by = property(lambda self: self.snapshot.stopped_by)

    def _with_prompt(self, name: str) -> ExecutionState:
        """The same execution (snapshot, history, abort signal are shared) seen
        from inside prompt `name` called as a tool: only `prompt_path` is its own."""
        view = copy.copy(self)
        view.prompt_path = [*self.prompt_path, name]
        return view

    def lose_lease(self, reason: str) -> None:
        """The lease is gone: abort now (the thread is not marked stopped; whoever holds it next resumes it)."""
        self.lease_lost = reason
        self.abort_signal.abort(reason)

    def force_turn(self, side: SideName) -> None:
        """Give the next turn to `side`, effective after the current step."""
        if side not in ("a", "b"):
            raise ValueError(f"force_turn: side must be 'a' or 'b', got {side!r}")
        self.snapshot.force_side(side)

    def stop(self, reason: str = "stopped", *, by: StoppedBy | None = None) -> None:
        """End the execution now: cancels the in-flight request and running tools.

        `by` says who stopped it: "caller" for a stop from outside the loop
        (Thread.stop, the HTTP API); by default the side whose turn it is, as
        when one of its tools stops the execution."""
        self.snapshot.end(by or self.snapshot.current_side, reason)
        self.abort_signal.abort(reason)


class ThreadState(Protocol):
    """A thread as its tools and hooks see it; annotate a tool's `state` parameter with this.

    Identity (`thread_id`, `agent_id`, `user_id`, `created_at`), the thread's `arguments`, the live
    `execution` (None at rest), an execution-local `context`, and the thread's messages, tools,
    events, key-value store, env values and sandbox, as docs/guide.md describes.
    """

    execution: ExecutionState | None
    context: dict[str, Any]

    @property
    def thread_id(self) -> str: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def user_id(self) -> str | None: ...
    @property
    def created_at(self) -> float: ...
    @property
    def arguments(self) -> Mapping[str, Any]: ...
    @property
    def tool_call_id(self) -> str | None: ...
    @property
    def idempotency_key(self) -> str | None: ...

    async def get_messages(
        self,
        limit: int | None = None,
        offset: int = 0,
        order: Literal["asc", "desc"] = "asc",
        include_silent: bool = False,
        max_depth: int | None = None,
    ) -> MessagesResult: ...
    async def inject_message(
        self,
        role: Literal["user", "assistant", "system"],
        content: str,
        silent: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> Message: ...
    async def load_agent(self, name: str) -> AgentDefinition: ...
    def queue_tool(self, name: str, args: dict[str, Any]) -> None: ...
    async def invoke_tool(self, name: str, args: dict[str, Any]) -> ToolResult: ...
    async def ask(self, payload: Any) -> Any: ...
    def emit(self, event: str, data: Any = None) -> None: ...
    async def get_value(self, key: str) -> Any | None: ...
    async def set_value(self, key: str, value: Any) -> None: ...
    async def env(self, name: str) -> str: ...
    async def env_type(self, name: str) -> EnvType: ...
    async def set_env(self, name: str, value: str, type: EnvType | None = None) -> None: ...
    def run_code(self, source: str, **options: Any) -> CodeExecution: ...
