"""OpenTelemetry spans, read back with the SDK's in-memory exporter.

The model is scripted (OpenAI-wire SSE bytes served by respx, read by the
runtime's wire reader), so the spans carry the usage and finish reasons the
bytes said. The exporter is installed as the global tracer provider, as a host
application would install its own.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from support import Q, definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core import tracing
from orchestrator.core.settings import RuntimeSettings
from providers.scripted import ScriptedCall, ScriptedResponse

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra's SDK is part of the test install")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

R = ScriptedResponse
C = ScriptedCall
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Any:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


class Code(BaseModel):
    source: str = ""


def _defs() -> Any:
    async def weather(state: Any, args: Q) -> ToolResult:
        return ToolResult.ok(f"sunny in {args.q}")

    async def broken(state: Any, args: Q) -> ToolResult:
        raise KeyError(args.q)

    async def calculate(state: Any, args: Code) -> ToolResult:
        result = await state.run_code(args.source, language="javascript")
        return ToolResult.ok(str(result.result))

    tools = {
        "weather": define_tool(description="Weather", args=Q, execute=weather),
        "broken": define_tool(description="Fails", args=Q, execute=broken),
        "calculate": define_tool(description="Run code", args=Code, execute=calculate),
    }
    prompts = {
        "pa": define_prompt(
            prompt="You help.", tool_description="side a", tools=("weather", "broken", "calculate", "helper")
        ),
        "helper": define_prompt(prompt="You help the helper.", tool_description="A helper prompt"),
    }
    return definitions(tools=tools, prompts=prompts, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))})


def _by_name(exported: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for span in exported:
        out.setdefault(span.name, []).append(span)
    return out


async def test_a_conversation_is_one_trace_of_agent_turn_chat_and_tool_spans(make_runtime: Any, spans: Any) -> None:
    script = [
        R(tool_calls=[C("weather", {"q": "Oslo"}), C("weather", {"q": "Rome"})], usage=(100, 20)),
        R(tool_calls=[C("broken", {"q": "x"})], usage=(150, 10)),
        R(text="Sunny in both.", usage=(200, 30)),
    ]
    rt, _ = await make_runtime(_defs(), script)
    thread = await rt.create_thread("chat")
    await thread.send("Weather in Oslo and Rome?")

    exported = spans.get_finished_spans()
    named = _by_name(exported)
    assert len({s.context.trace_id for s in exported}) == 1
    [agent] = named["invoke_agent chat"]
    assert agent.attributes["gen_ai.conversation.id"] == thread.id
    assert agent.attributes["gen_ai.usage.input_tokens"] == 450
    [turn] = named["turn a"]
    assert turn.parent.span_id == agent.context.span_id

    chats = named["chat demo"]
    assert [(c.attributes["gen_ai.usage.input_tokens"], c.attributes["gen_ai.usage.output_tokens"]) for c in chats] == [
        (100, 20),
        (150, 10),
        (200, 30),
    ]
    assert {c.attributes["gen_ai.operation.name"] for c in chats} == {"chat"}
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_calls",),
        ("tool_calls",),
        ("stop",),
    ]
    assert all(c.parent.span_id == turn.context.span_id for c in chats)
    assert all(c.kind == trace.SpanKind.CLIENT for c in chats)
    assert "gen_ai.input.messages" not in chats[0].attributes  # content only when asked for

    tools = named["execute_tool weather"] + named["execute_tool broken"]
    assert len(tools) == 3
    assert {t.attributes["gen_ai.tool.name"] for t in tools} == {"weather", "broken"}
    [failed] = named["execute_tool broken"]
    assert failed.status.status_code == trace.StatusCode.ERROR and failed.attributes["error.type"] == "tool_error"


async def test_nested_prompts_and_sandbox_runs_are_child_spans(make_runtime: Any, spans: Any) -> None:
    script = [
        R(tool_calls=[C("helper", {"message": "help"}), C("calculate", {"source": "export default () => 6 * 7"})]),
        R(text="helped"),
        R(text="Done."),
    ]
    rt, _ = await make_runtime(_defs(), script)
    await (await rt.create_thread("chat")).send("go")

    named = _by_name(spans.get_finished_spans())
    [helper_call] = named["execute_tool helper"]
    nested_chats = [c for c in named["chat demo"] if c.parent.span_id == helper_call.context.span_id]
    assert len(nested_chats) == 1 and nested_chats[0].attributes["orchestrator.depth"] == 1
    [code] = named["run_code javascript"]
    [calculate] = named["execute_tool calculate"]
    assert code.parent.span_id == calculate.context.span_id


async def test_message_content_is_recorded_only_when_asked_and_then_redacted(
    make_runtime: Any, spans: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-test-abcdefghijklmnopqrstuvwxyz0123"
    monkeypatch.setenv("TRACE_TEST_KEY", key)
    config = {
        "providers": {"scripted": {"type": "scripted"}, "other": {"type": "openai", "api_key": "${TRACE_TEST_KEY}"}},
        "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
        "default_model": "demo",
    }
    rt, _ = await make_runtime(
        _defs(), [R(text=f"the key is {key}")], config=config, settings=RuntimeSettings(trace_content=True)
    )
    await (await rt.create_thread("chat")).send(f"my key is {key}")

    [chat] = _by_name(spans.get_finished_spans())["chat demo"]
    assert "my key is ***" in chat.attributes["gen_ai.input.messages"]
    assert "the key is ***" in chat.attributes["gen_ai.output.messages"]
    assert all(key not in str(value) for value in chat.attributes.values())


async def test_the_trace_context_travels_with_a_handed_off_execution(make_runtime: Any, spans: Any) -> None:
    """What a server does before queueing (carrier) and a worker before running (attach_context)."""
    rt, _ = await make_runtime(_defs(), [R(text="hi")])
    thread = await rt.create_thread("chat")
    with trace.get_tracer("server").start_as_current_span("POST /threads/send") as request_span:
        headers = tracing.carrier()
    assert "traceparent" in headers

    with tracing.attach_context(headers):  # in the worker: no span of the server's is current here
        await thread.send("hello")

    [agent] = _by_name(spans.get_finished_spans())["invoke_agent chat"]
    assert agent.context.trace_id == request_span.context.trace_id
    assert agent.parent.span_id == request_span.context.span_id


async def test_until_a_tracer_provider_is_set_no_span_is_started(
    make_runtime: Any, monkeypatch: Any, spans: Any
) -> None:
    """With the API installed but no provider set every span is a no-op, yet starting one
    holds a dozen objects per level for the whole execution (work for every full garbage
    collection at 1,000 conversations): the methods then run bare, and tracing starts as
    soon as the host sets its provider."""
    asked: list[str] = []
    real_get_tracer = trace.get_tracer
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.ProxyTracerProvider())
    monkeypatch.setattr(trace, "get_tracer", lambda *a, **k: asked.append(a[0]) or real_get_tracer(*a, **k))
    rt, _ = await make_runtime(_defs(), [R(tool_calls=[C("weather", {"q": "Oslo"})]), R(text="Sunny.")] * 2)
    result = await (await rt.create_thread("chat")).send("Weather in Oslo?")
    assert result.output == "Sunny." and asked == []

    monkeypatch.undo()
    monkeypatch.setattr(trace, "get_tracer", lambda *a, **k: asked.append(a[0]) or real_get_tracer(*a, **k))
    await (await rt.create_thread("chat")).send("Weather in Oslo?")
    assert len(asked) == 5 and len(spans.get_finished_spans()) == 5  # agent, turn, two chats, one tool
