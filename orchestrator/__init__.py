"""A two-sided orchestration runtime for LLM agents, on LiteLLM.

Importing this package is cheap: the runtime, LiteLLM and the server load on
first use of the names that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .definitions import (
    AgentDefinition,
    DefinitionError,
    HookDefinition,
    PromptDefinition,
    Side,
    ToolDefinition,
    VariableDefinition,
    define_agent,
    define_hook,
    define_prompt,
    define_tool,
)
from .messages import Event, Message, MessagesResult, ToolCall
from .results import AttachmentRef, ToolAttachment, ToolResult

if TYPE_CHECKING:
    from .runtime import ExecutionResult, Runtime, Thread
    from .state import AbortSignal, ExecutionState, ThreadState

_LAZY = {
    "Runtime": ".runtime",
    "Thread": ".runtime",
    "ExecutionResult": ".runtime",
    "ThreadState": ".state",
    "ExecutionState": ".state",
    "AbortSignal": ".state",
}

__version__ = "0.2.0"

__all__ = [
    "AbortSignal",
    "AgentDefinition",
    "AttachmentRef",
    "DefinitionError",
    "Event",
    "ExecutionResult",
    "ExecutionState",
    "HookDefinition",
    "Message",
    "MessagesResult",
    "PromptDefinition",
    "Runtime",
    "Side",
    "Thread",
    "ThreadState",
    "ToolAttachment",
    "ToolCall",
    "ToolDefinition",
    "ToolResult",
    "VariableDefinition",
    "define_agent",
    "define_hook",
    "define_prompt",
    "define_tool",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
