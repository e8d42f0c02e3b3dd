"""Running hooks: one function per hook name, sync or async.

Signatures (each gets the thread's `ThreadState` first):

- `prefilter_llm_history(state, messages: list[dict]) -> list[dict] | None`
  the provider-format request messages of one step, from one snapshot.
- `before_create_message(state, message: Message) -> Message | None`
- `after_create_message(state, message: Message) -> None`
- `before_update_message(state, message: Message) -> Message | None`
- `after_update_message(state, message: Message) -> None`
- `tool_call_started(state, call: ToolCallStart) -> None`
- `before_store_tool_result(state, call: ToolCall, result: ToolResult) -> ToolResult | None`
- `after_tool_call_success(state, call: ToolCall, result: ToolResult) -> None`
- `after_tool_call_failure(state, call: ToolCall, result: ToolResult) -> None`

A hook that returns None leaves the value as it was. A hook that raises is
logged and, for transforming hooks, leaves the value unchanged: a broken hook
must not lose a message.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import BaseModel

from orchestrator.definitions.define import HookDefinition

if TYPE_CHECKING:
    from orchestrator.engine.state import ThreadState

_log = structlog.get_logger("orchestrator.engine.hooks")


class ToolCallStart(BaseModel):
    """What `tool_call_started` receives (hook argument and event data)."""

    id: str
    name: str
    index: int
    progress_argument: str | None = None
    progress_value: str | None = None
    side: str | None = None
    depth: int = 0


class Hooks:
    def __init__(self, hooks: Mapping[str, HookDefinition] | None = None) -> None:
        self._fns = {name: h.fn for name, h in (hooks or {}).items()}

    def has(self, name: str) -> bool:
        return name in self._fns

    async def call(self, name: str, state: ThreadState, *args: Any) -> Any:
        """Run hook `name`; returns its result, or None if absent or failed."""
        fn = self._fns.get(name)
        if fn is None:
            return None
        try:
            out = fn(state, *args)
            if inspect.isawaitable(out):
                out = await out
            return out
        except Exception as exc:
            _log.warning("hook_failed", hook=name, error=f"{type(exc).__name__}: {exc}")
            return None

    async def transform(self, name: str, state: ThreadState, value: Any, *extra: Any) -> Any:
        """Run a transforming hook: its non-None result replaces `value`."""
        if name not in self._fns:
            return value
        out = await self.call(name, state, *extra, value) if extra else await self.call(name, state, value)
        return value if out is None else out
