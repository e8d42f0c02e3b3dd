"""Attack: what a model sends is input too (issue 43, item 5).

- Deep tool arguments: ~1,000 levels of brackets (2 KB) raised `RecursionError` in the argument
  parse (only `JSONDecodeError` was caught); the step broke, the thread stayed `running`, and every
  resume broke again. Now the call gets an error result naming the limit, and the thread goes on.
"""

from __future__ import annotations

from typing import Any

import pytest
from support import Q, chat_definitions

from orchestrator import define_tool
from orchestrator.checks import calls_made
from providers.model_json import MAX_DEPTH
from providers.scripted import ScriptedCall, ScriptedResponse

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-model-input-0123456789", "GEMINI_API_KEY": "AIza-model-input-0123456789abcdef"}


def wire_config(wire: str, **model: Any) -> dict[str, Any]:
    """One model alias `m` on `wire`, served by a ScriptedModel of that wire; `model` adds settings."""
    provider = {
        "openai": {"type": "scripted"},
        "anthropic": {"type": "anthropic", "api_key": "${ANTHROPIC_API_KEY}"},
        "gemini": {"type": "gemini", "api_key": "${GEMINI_API_KEY}"},
    }[wire]
    name = {"openai": "demo", "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}[wire]
    entry = {"provider": "p", "model": name, "retry": {"attempts": 1}, "params": {"max_tokens": 256}, **model}
    return {"providers": {"p": provider}, "models": {"m": entry}, "default_model": "m"}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def _nested(depth: int) -> str:
    return '{"q": "x", "extra": ' + "[" * depth + "]" * depth + "}"


def _tool(ran: list[str]) -> Any:
    async def run(state: Any, args: Q) -> dict[str, str]:
        ran.append(args.q)
        return {"status": "success", "result": "ok"}

    return define_tool(description="Look up", args=Q, execute=run)


WIRES_AND_DEPTHS = [
    ("openai", MAX_DEPTH + 1),
    ("openai", 1_000),
    ("openai", 50_000),
    ("anthropic", 1_000),
    ("gemini", 200),  # Gemini sends the arguments as JSON inside its chunk: parseable, and past the limit
]


@pytest.mark.parametrize(("wire", "depth"), WIRES_AND_DEPTHS)
async def test_deep_tool_arguments_are_an_error_result_and_the_thread_goes_on(
    make_runtime: Any, wire: str, depth: int
) -> None:
    ran: list[str] = []
    defs = chat_definitions({"lookup": _tool(ran)}, ("lookup",))
    script = [
        ScriptedResponse(tool_calls=[ScriptedCall("lookup", _nested(depth))], chunk_size=4096),
        ScriptedResponse(text="sorry, flatter next time"),
        ScriptedResponse(text="still here"),
    ]
    rt, model = await make_runtime(defs, script, config=wire_config(wire), wire=wire)
    thread = await rt.create_thread("chat")
    result = await thread.send("go")
    assert result.output == "sorry, flatter next time"
    assert ran == []
    messages = (await thread.get_messages(include_silent=True)).messages
    [error] = [m for m in messages if m.role == "tool"]
    assert error.tool_status == "error"
    assert f"deeper than {MAX_DEPTH} levels" in (error.content or "") and "'lookup'" in (error.content or "")
    assert f"deeper than {MAX_DEPTH} levels" in str(model.requests[1])  # the model read why
    assert (await rt.storage.get_thread(thread.id)).status != "running"
    assert len(await calls_made(thread)) == 1  # the eval checks read the stored call too
    assert (await thread.send("again")).output == "still here"


async def test_arguments_at_the_limit_still_run(make_runtime: Any) -> None:
    ran: list[str] = []
    defs = chat_definitions({"lookup": _tool(ran)}, ("lookup",))
    at_limit = '{"q": "x", "extra": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    script = [ScriptedResponse(tool_calls=[ScriptedCall("lookup", at_limit)]), ScriptedResponse(text="done")]
    rt, _ = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    await thread.send("go")
    assert ran == ["x"]
