"""Calls made with `state.invoke_tool` are visible: events under the calling tool's id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from support import definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.cli.console import ConsoleView
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict


class _City(BaseModel):
    city: str = "Oslo"


async def _forecast(state: Any, args: _City) -> ToolResult:
    return ToolResult.ok(f"sunny in {args.city}")


async def _trip(state: Any, args: _City) -> ToolResult:
    inner = await state.invoke_tool("forecast", {"city": "Bergen"})
    refused = None
    try:
        await state.invoke_tool("trip", {})
    except Exception as exc:
        refused = type(exc).__name__
    return ToolResult.ok(f"trip planned ({inner.result}; {refused})")


async def test_invoked_calls_publish_events_under_their_caller(tmp_path: Path) -> None:
    defs = definitions(
        tools={
            "forecast": define_tool(description="Forecast", args=_City, execute=_forecast),
            "trip": define_tool(description="Plan a trip", args=_City, execute=_trip, uses=("forecast",)),
        },
        prompts={"planner": define_prompt(prompt="Plan.", tools=("trip",), tool_description="plan")},
        agents={"travel": define_agent(type="ai_human", side_a=Side("planner"))},
    )
    runtime = Runtime(
        defs,
        config=config_from_dict({}),
        storage=SQLiteStorage(str(tmp_path / "i.db")),
        settings=RuntimeSettings(model="test"),
    )
    async with runtime:
        thread = await runtime.create_thread("travel")
        await thread.send("Plan a trip")
        events = [e async for e in _log(thread)]
    started = next(e.data for e in events if e.type == "tool_call_started")
    invoked = [e for e in events if e.type in ("tool_invoked", "tool_invoked_result")]
    assert [(e.type, e.data["name"], e.data.get("tool_status")) for e in invoked] == [
        ("tool_invoked", "forecast", None),
        ("tool_invoked_result", "forecast", "success"),
    ]  # the refused call ran nothing
    assert all(e.data["parent_id"] == started["id"] for e in invoked)
    assert invoked[1].data["content"] == "sunny in Bergen" and invoked[0].data["arguments"] == {"city": "Bergen"}
    result = next(e.data for e in events if e.type == "tool_result")
    assert result["content"] == "trip planned (sunny in Bergen; ToolUseError)"

    console = Console(record=True, width=200)
    view = ConsoleView({"a": "planner", "b": "person"}, console=console)
    for event in invoked[:2]:
        view.show(event)
    out = console.export_text()
    assert "↳ forecast (invoked by a tool)" in out and "✓ forecast: sunny in Bergen" in out


async def _log(thread: Any) -> Any:
    async for event in thread.events(after=0):
        yield event
        if event.type == "execution_stopped":
            return
