"""A two-sided orchestration runtime for LLM agents, on LiteLLM.

Importing this package is cheap: every public name loads its module on first use
(PEP 562), so `orchestrator --help` does not build the pydantic models, and the
runtime, LiteLLM and the server load only when a program needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.core.event_types import (
        BUILTIN_EVENT_TYPES,
        CustomEvent,
        TypedEvent,
        events_json_schema,
        parse_event,
    )
    from orchestrator.core.messages import Event, Message, MessagesResult, ToolCall
    from orchestrator.core.results import AttachmentRef, ToolAttachment, ToolResult
    from orchestrator.definitions.define import (
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
    from orchestrator.definitions.thread_state import AbortSignal, ExecutionState, ThreadState
    from orchestrator.runtime import ExecutionResult, Runtime, Thread

_LAZY = {
    **dict.fromkeys(
        (
            "AgentDefinition",
            "DefinitionError",
            "HookDefinition",
            "PromptDefinition",
            "Side",
            "ToolDefinition",
            "VariableDefinition",
            "define_agent",
            "define_hook",
            "define_prompt",
            "define_tool",
        ),
        ".definitions.define",
    ),
    **dict.fromkeys(("Event", "Message", "MessagesResult", "ToolCall"), ".core.messages"),
    **dict.fromkeys(("AttachmentRef", "ToolAttachment", "ToolResult"), ".core.results"),
    "TypedEvent": ".core.event_types",  # events as typed models: orchestrator/core/event_types.py
    "CustomEvent": ".core.event_types",
    "parse_event": ".core.event_types",
    "events_json_schema": ".core.event_types",
    "BUILTIN_EVENT_TYPES": ".core.event_types",
    "Runtime": ".runtime",
    "Thread": ".runtime",
    "ExecutionResult": ".runtime",
    "ThreadState": ".definitions.thread_state",
    "ExecutionState": ".definitions.thread_state",
    "AbortSignal": ".definitions.thread_state",
}

__version__ = "0.2.0"

__all__ = [
    "BUILTIN_EVENT_TYPES",
    "AbortSignal",
    "AgentDefinition",
    "AttachmentRef",
    "CustomEvent",
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
    "TypedEvent",
    "VariableDefinition",
    "define_agent",
    "define_hook",
    "define_prompt",
    "define_tool",
    "events_json_schema",
    "parse_event",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
