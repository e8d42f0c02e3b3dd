"""A tool result that is not valid UTF-8 text becomes an error result; the thread goes on.

A Python string may hold a lone surrogate (``'\\ud800'``): a tool's own text,
or a sandboxed program's string (``'\\uD800'`` in JavaScript). No storage can
write one: before, storing the result raised (``UnicodeEncodeError`` on
SQLite, ``DataError`` on PostgreSQL), the thread stayed ``running`` and every
later send failed. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from storage_backends import StorageFactory, fake_clock, storage_factory  # noqa: F401
from support import Q, definitions

from orchestrator import Side, ThreadState, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.sandbox import CodeResult, run_code
from providers.config import config_from_dict

ROOT = Path(__file__).resolve().parents[2]
_SEND_TIMEOUT = 60.0  # a wedged thread must fail the test, not hang it


def _load_calculate() -> Any:
    path = ROOT / "agents" / "tools" / "calculate.py"
    spec = importlib.util.spec_from_file_location("_calculate_tool_text", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the postponed annotations through it
    spec.loader.exec_module(module)
    return module


def _runtime(factory: StorageFactory, tools: dict[str, Any], model: str, config: dict[str, Any]) -> Runtime:
    prompt = define_prompt(prompt="You use tools.", tools=tuple(tools), tool_description="uses tools")
    defs = definitions(
        tools=tools, prompts={"p": prompt}, agents={"chat": define_agent(type="ai_human", side_a=Side("p"))}
    )
    return Runtime(defs, config=config_from_dict(config), storage=factory.make(), settings=RuntimeSettings(model=model))


async def _send(thread: Any, text: str) -> Any:
    return await asyncio.wait_for(thread.send(text), _SEND_TIMEOUT)


async def _tool_messages(thread: Any) -> list[Any]:
    return [m for m in (await thread.get_messages()).messages if m.role == "tool"]


async def test_a_plain_tool_returning_a_lone_surrogate_is_an_error_result(storage_factory: StorageFactory) -> None:
    returned = ["\ud800 first", "fine"]

    async def echo(state: ThreadState, args: Q) -> ToolResult:
        return ToolResult.ok(returned.pop(0))

    tools = {"echo": define_tool(description="Echo", args=Q, execute=echo)}
    async with _runtime(storage_factory, tools, "test", {}) as runtime:
        thread = await runtime.create_thread("chat")
        await _send(thread, "hi")
        [tool] = await _tool_messages(thread)
        assert tool.tool_status == "error"
        assert "UTF-8" in tool.content and "surrogate" in tool.content and "\\ud800 first" in tool.content
        assert (await thread.refresh()).status != "running"
        second = await _send(thread, "again")  # the thread is usable: the next send runs the tool again
        assert second.output is not None
        tools_after = await _tool_messages(thread)
        assert [m.tool_status for m in tools_after] == ["error", "success"]
        assert tools_after[1].content == "fine"
        assert (await thread.refresh()).status != "running"


async def test_a_tool_error_and_stack_with_a_lone_surrogate_are_an_error_result(
    storage_factory: StorageFactory,
) -> None:
    async def boom(state: ThreadState, args: Q) -> ToolResult:
        raise ValueError("bad \udfff byte")

    tools = {"boom": define_tool(description="Boom", args=Q, execute=boom)}
    async with _runtime(storage_factory, tools, "test", {}) as runtime:
        thread = await runtime.create_thread("chat")
        await _send(thread, "hi")
        [tool] = await _tool_messages(thread)
        assert tool.tool_status == "error" and "UTF-8" in tool.content and "\\udfff" in tool.content
        assert (await thread.refresh()).status != "running"
        await _send(thread, "again")
        assert (await thread.refresh()).status != "running"


async def test_a_lone_surrogate_through_calculate_is_an_error_result(
    storage_factory: StorageFactory, tmp_path: Path
) -> None:
    """The attack as reported: `export default '\\uD800'+'x'` through the shipped tool."""
    calculate = _load_calculate().tool
    turns = [
        {"tool_calls": [{"name": "calculate", "arguments": {"code": "export default '\\uD800' + 'x'"}}]},
        {"text": "noted"},
        {"tool_calls": [{"name": "calculate", "arguments": {"code": "export default 6 * 7"}}]},
        {"text": "forty-two"},
    ]
    script = tmp_path / "turns.json"
    script.write_text(json.dumps(turns))
    config = {"models": {"scripted": {"provider": "offline", "model": str(script)}}}
    async with _runtime(storage_factory, {"calculate": calculate}, "scripted", config) as runtime:
        thread = await runtime.create_thread("chat")
        first = await _send(thread, "compute")
        assert first.output == "noted"
        [tool] = await _tool_messages(thread)
        assert tool.tool_status == "error" and "UTF-8" in tool.content and "surrogate" in tool.content
        assert (await thread.refresh()).status != "running"
        second = await _send(thread, "again")
        assert second.output == "forty-two"
        assert [m.content for m in await _tool_messages(thread)][1] == "42"


# -- run_code: both engines' results are checked before anyone stores them --------------


@pytest.mark.parametrize(
    "source",
    ["export default '\\uD800' + 'x'", "export default { ['k\\uDC00']: 1 }", "export default () => ['ok', '\\uDBFF']"],
)
async def test_a_javascript_value_with_a_lone_surrogate_is_an_error_result(source: str) -> None:
    result = await run_code(source, timeout=5.0)
    assert result.status == "error" and result.value is None
    assert result.error is not None and "value" in result.error and "UTF-8" in result.error
    json.loads(result.model_dump_json())  # storable


@pytest.mark.parametrize("part", ["value", "error", "stack", "console"])
async def test_whatever_the_python_engine_returns_is_checked(part: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python engine is faked: what is checked is what any engine hands back, whatever its guest did."""
    from orchestrator.sandbox import python as engine

    async def fake_run_python(request: Any, abort: Any, lease: Any) -> CodeResult:
        lease.release()
        return CodeResult(status="ok" if part in ("value", "console") else "error", **{part: "x\udfff"})

    monkeypatch.setattr(engine, "run_python", fake_run_python)
    result = await run_code("1", language="python", timeout=5.0)
    assert result.status == "error" and result.value is None
    assert result.error is not None and f"run's {part}:" in result.error and "UTF-8" in result.error
    if part in ("stack", "console"):  # kept, escaped: the program's own output helps its author
        assert getattr(result, part) == "x\\udfff"
    json.loads(result.model_dump_json())


# -- the model's own text ----------------------------------------------------------------


async def test_a_model_answer_with_a_lone_surrogate_is_stored_and_the_thread_goes_on(
    storage_factory: StorageFactory, tmp_path: Path
) -> None:
    """A provider's JSON may carry `\\ud800` (an escape no UTF-8 text holds): the text, the reasoning and a tool
    call's progress argument get U+FFFD in its place, as a decoder would, instead of a step no storage can write."""

    async def echo(state: ThreadState, args: Q) -> ToolResult:
        return ToolResult.ok("echoed")

    tools = {"echo": define_tool(description="Echo", args=Q, execute=echo, progress_argument="q")}
    turns = [
        {"tool_calls": [{"name": "echo", "arguments": {"q": "bad \ud800 arg"}}], "text": "calling \udfff"},
        {"text": "done \ud800 here"},
        {"text": "fine"},
    ]
    script = tmp_path / "turns.json"
    script.write_text(json.dumps(turns))  # ensure_ascii: the file holds the escapes, as a provider's JSON does
    config = {"models": {"scripted": {"provider": "offline", "model": str(script)}}}
    async with _runtime(storage_factory, tools, "scripted", config) as runtime:
        thread = await runtime.create_thread("chat")
        first = await _send(thread, "hi")
        assert first.output == "done \ufffd here"
        assert (await thread.refresh()).status != "running"
        stored = [m.content for m in (await thread.get_messages()).messages if m.role == "assistant"]
        assert stored == ["calling \ufffd", "done \ufffd here"]
        started = [e for e in [e async for e in _events(thread)] if e.type == "tool_call_started"]
        assert "bad \ufffd arg" in json.dumps(started[0].data, ensure_ascii=False)
        second = await _send(thread, "again")
        assert second.output == "fine"


async def _events(thread: Any) -> Any:
    async for event in thread.events(after=0):
        yield event
        if event.type == "execution_stopped" and event.seq > 1:
            return
