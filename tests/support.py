"""Helpers shared by test modules (import as `from support import ...`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator import Side, define_agent, define_prompt
from orchestrator.definitions.loader import Definitions


def definitions(
    *, tools: dict | None = None, prompts: dict | None = None, agents: dict | None = None, hooks: dict | None = None
) -> Definitions:
    """Definitions built in code, named as the loader would name them."""
    return Definitions(
        root=Path("."),
        tools={k: v.named(k) for k, v in (tools or {}).items()},
        prompts={k: v.named(k) for k, v in (prompts or {}).items()},
        agents={k: v.named(k) for k, v in (agents or {}).items()},
        hooks={k: v.named(k) for k, v in (hooks or {}).items()},
    )


class Q(BaseModel):
    """A one-field argument model for test tools."""

    q: str = ""


def tool_names(request: dict[str, Any]) -> list[str]:
    """The tool names a model request offered."""
    return [t["function"]["name"] for t in request.get("tools") or []]


def chat_definitions(
    tools: dict[str, Any],
    a_tools: tuple[str, ...],
    *,
    prompts: dict[str, Any] | None = None,
    agents: dict[str, Any] | None = None,
) -> Definitions:
    """One ai_human agent `chat` whose side a prompt `pa` offers `a_tools`."""
    all_prompts = {
        "pa": define_prompt(prompt="You are side a.", tool_description="side a", tools=a_tools),
        **(prompts or {}),
    }
    all_agents = {"chat": define_agent(type="ai_human", side_a=Side("pa")), **(agents or {})}
    return definitions(tools=tools, prompts=all_prompts, agents=all_agents)


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results a model request carried."""
    return [m for m in request["messages"] if m["role"] == "tool"]


async def event_log(rt: Any, thread: Any) -> list[Any]:
    """The thread's durable event log so far (text deltas are live-only)."""
    return list(await rt.storage.events_after(thread.id, 0))


class Crash(BaseException):
    """Stands in for the process dying: no tool or step catches it, and the thread stays `running`."""


async def wait_until_cancelled(entered: asyncio.Event, cancelled: asyncio.Event) -> None:
    """A tool's or hook's body that never ends on its own: sets `entered`, then `cancelled` when cancelled."""
    entered.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.set()
        raise
