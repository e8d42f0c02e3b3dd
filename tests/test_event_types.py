"""Typed events (#18): every event the runtime publishes fits its model in orchestrator/core/event_types.py,
and the CLI, the server, the page and docs/server.md all go by the same schema.

Beside these tests, the whole suite runs with ORCHESTRATOR_CHECK_EVENTS=1 (tests/conftest.py), so every
event any test makes the runtime publish is checked against its model as it is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import typing
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ValidationError
from support import definitions
from test_answer_ends import answer, chat  # noqa: F401 - chat: a fixture answering with raw SSE

from orchestrator import (
    BUILTIN_EVENT_TYPES,
    CustomEvent,
    Event,
    Message,
    Side,
    ToolResult,
    define_agent,
    define_prompt,
    define_tool,
    events_json_schema,
    parse_event,
)
from orchestrator.cli.main import main
from orchestrator.core.event_types import (
    BUILTIN_EVENTS,
    ExecutionFailedEvent,
    MessageCreatedEvent,
    ModelFallbackEvent,
    ModelFinishErrorEvent,
    TextDeltaEvent,
)
from orchestrator.server.app import create_app
from orchestrator.storage.events import EventBus
from providers.scripted import ScriptedCall, ScriptedFault, ScriptedResponse

ROOT = Path(__file__).resolve().parent.parent
R = ScriptedResponse
C = ScriptedCall


class OrderArgs(BaseModel):
    order_id: str


class EndArgs(BaseModel):
    reason: str = "done"


async def _lookup(state: Any, args: OrderArgs) -> ToolResult:
    state.emit("order_looked_up", {"order_id": args.order_id})
    carrier = await state.invoke_tool("carrier", {"order_id": args.order_id})
    return ToolResult.ok(f"order {args.order_id} shipped with {carrier.result}")


async def _carrier(state: Any, args: OrderArgs) -> ToolResult:
    return ToolResult.ok("Posten")


async def _end(state: Any, args: EndArgs) -> ToolResult:
    return ToolResult.ok("bye")


def _defs() -> Any:
    return definitions(
        tools={
            "lookup_order": define_tool(
                description="Look up an order",
                args=OrderArgs,
                execute=_lookup,
                progress_argument="order_id",
                uses=("carrier",),
            ),
            "carrier": define_tool(description="The carrier of an order", args=OrderArgs, execute=_carrier),
            "end_chat": define_tool(description="End the chat", args=EndArgs, execute=_end),
        },
        prompts={
            "agent_p": define_prompt(prompt="You are support.", tool_description="support", tools=("lookup_order",)),
            "customer_p": define_prompt(prompt="You are a customer.", tool_description="customer", tools=("end_chat",)),
        },
        agents={
            "demo": define_agent(
                type="dual_ai",
                side_a=Side("agent_p", max_steps=4),
                side_b=Side("customer_p", end_conversation_tool="end_chat"),
                max_session_turns=6,
            )
        },
    )


CONVERSATION = [
    R(text="Hello, how can I help?"),
    R(text="Where is order 42?"),
    R(tool_calls=[C("lookup_order", {"order_id": "42"})]),
    R(text="Order 42 has shipped."),
    R(tool_calls=[C("end_chat", {"reason": "done"})], text="Thanks!"),
]


async def _watch(thread: Any) -> list[Event]:
    got: list[Event] = []
    async for event in thread.events(after=0):
        got.append(event)
        if event.type == "execution_stopped":
            return got
    return got


async def test_a_conversation_publishes_only_events_that_fit_their_models(make_runtime: Any) -> None:
    runtime, _ = await make_runtime(_defs(), CONVERSATION)
    thread = await runtime.create_thread("demo")
    watcher = asyncio.create_task(_watch(thread))  # live: text_delta too
    await asyncio.sleep(0)
    await thread.run()
    live = await asyncio.wait_for(watcher, 15)
    stored = await runtime.storage.events_after(thread.id, 0)

    validator = jsonschema.Draft202012Validator(events_json_schema())
    for event in live + stored:
        typed = parse_event(event)  # strict: raises on any field too many or too few
        assert typed.type == event.type and typed.seq == event.seq
        validator.validate(json.loads(event.model_dump_json()))  # the served schema agrees with the models
    seen = {e.type for e in live}
    assert {
        "thread_created",
        "execution_started",
        "turn_started",
        "step_started",
        "text_delta",
        "tool_call_started",
        "message_created",
        "tool_result",
        "tool_invoked",
        "tool_invoked_result",
        "turn_ended",
        "execution_stopped",
        "order_looked_up",
    } <= seen
    custom = [parse_event(e) for e in live if e.type == "order_looked_up"]
    assert custom and all(isinstance(c, CustomEvent) and c.data == {"order_id": "42"} for c in custom)
    created = next(parse_event(e) for e in stored if e.type == "message_created")
    assert isinstance(created, MessageCreatedEvent) and isinstance(created.data, Message)


FRAME = {"thread_id": "thr_1", "seq": 3, "at": 1.5}
DELTA = {"side": "a", "depth": 0, "text": "Hel"}


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        ({**FRAME, "type": "text_delta", "data": {"side": "a", "depth": 0}}, "data.text"),
        ({**FRAME, "type": "text_delta", "data": {**DELTA, "model": "x"}}, "data.model"),
        ({**FRAME, "type": "text_delta", "data": {**DELTA, "depth": "0"}}, "data.depth"),  # no coercion
        ({**FRAME, "type": "text_delta", "data": {**DELTA, "side": "c"}}, "data.side"),
        ({**FRAME, "type": "text_delta", "data": "Hel"}, "data"),
        ({**FRAME, "type": "text_delta", "data": DELTA, "extra": 1}, "extra"),
        ({**FRAME, "seq": 0, "type": "text_delta", "data": DELTA}, "seq"),
        ({**FRAME, "type": "turn_ended", "data": {"side": "a", "reason": "bored"}}, "data.reason"),
        ({**FRAME, "type": "model_fallback", "data": {"from_": "a", "to": "b", "error": "x"}}, "data.from"),
        ({**FRAME, "type": "execution_failed", "data": {"code": "oops", "error": "x"}}, "data"),
        ({**FRAME, "type": "", "data": None}, "type"),
    ],
)
def test_an_event_of_the_wrong_shape_is_rejected(frame: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_event(frame)
    assert problem in str(info.value)
    with pytest.raises(ValidationError):
        parse_event(json.dumps(frame))
    assert not jsonschema.Draft202012Validator(events_json_schema()).is_valid(frame)


def test_the_right_shapes_are_accepted_and_typed() -> None:
    assert isinstance(parse_event({**FRAME, "type": "text_delta", "data": DELTA}), TextDeltaEvent)
    fallback = parse_event({**FRAME, "type": "model_fallback", "data": {"from": "a", "to": "b", "error": "x"}})
    assert isinstance(fallback, ModelFallbackEvent) and fallback.data.from_ == "a"
    for data in (
        {"flow_id": "f", "error": "x", "provider": None, "status": 429},
        {"code": "thread_busy", "error": "x"},
    ):
        assert isinstance(parse_event({**FRAME, "type": "execution_failed", "data": data}), ExecutionFailedEvent)
    for data in ({"any": ["json", 1, None]}, "text", None, 3):
        assert isinstance(parse_event({**FRAME, "type": "my_event", "data": data}), CustomEvent)


async def test_the_bus_refuses_a_wrong_shape_while_checking(make_runtime: Any, monkeypatch: Any) -> None:
    assert os.environ.get("ORCHESTRATOR_CHECK_EVENTS") == "1"  # the suite runs with the check on
    runtime, _ = await make_runtime(_defs(), [])
    thread = await runtime.create_thread("demo")  # seq 1
    bus = runtime.services.bus
    with pytest.raises(ValidationError, match="data.text"):
        bus.publish(thread.id, "text_delta", {"side": "a", "depth": 0})
    assert bus.publish(thread.id, "text_delta", DELTA).seq == 2  # a refused event took no number
    assert bus.publish(thread.id, "anything", {"free": "form"}).seq == 3

    monkeypatch.delenv("ORCHESTRATOR_CHECK_EVENTS")
    unchecked = EventBus(runtime.storage, runtime.services.redactor)  # the default: no cost per event
    await unchecked.attach(thread.id)
    assert unchecked.publish(thread.id, "text_delta", {"wrong": True}).data == {"wrong": True}


def test_cli_prints_the_json_schema_of_the_union() -> None:
    result = CliRunner().invoke(main, ["schema", "events"], catch_exceptions=False)
    assert result.exit_code == 0
    schema = json.loads(result.output)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema == events_json_schema()
    assert len(schema["oneOf"]) == len(BUILTIN_EVENT_TYPES) + 1  # and CustomEvent
    assert schema["discriminator"]["propertyName"] == "type"
    assert set(schema["discriminator"]["mapping"]) == BUILTIN_EVENT_TYPES
    for ref in [*schema["discriminator"]["mapping"].values(), *(o["$ref"] for o in schema["oneOf"])]:
        assert ref.removeprefix("#/$defs/") in schema["$defs"]
    one_line = CliRunner().invoke(main, ["schema", "events", "--indent", "0"]).output
    assert one_line.count("\n") == 1 and json.loads(one_line) == schema


async def test_the_server_serves_the_same_schema_without_a_token(make_runtime: Any) -> None:
    runtime, _ = await make_runtime(_defs(), [])
    app = create_app(runtime, tokens={"secret": "alice"})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        res = await client.get("/schema/events")
        assert res.status_code == 200 and res.json() == events_json_schema()
        assert "/schema/events" in (await client.get("/openapi.json")).json()["paths"]


def _data_cell(model: type[BaseModel]) -> str:
    """What docs/server.md's `data` column says for a type: its fields, or the stored Message."""
    data = model.model_fields["data"].annotation
    parts = typing.get_args(data) or (data,)
    if parts == (Message,):
        return "the stored `Message`"
    return " / ".join(", ".join(f"`{f.alias or name}`" for name, f in p.model_fields.items()) for p in parts)


def test_docs_list_every_event_type_with_its_fields_and_no_other() -> None:
    text = (ROOT / "docs" / "server.md").read_text()
    table = text.split("<!-- event-types -->")[1].split("<!-- /event-types -->")[0]
    rows = [line.split(" | ") for line in table.strip().splitlines()[2:]]
    documented = {row[0].strip("| `"): row[1] for row in rows}
    assert len(documented) == len(rows)  # each once
    assert set(documented) == BUILTIN_EVENT_TYPES
    for model in BUILTIN_EVENTS:
        name = typing.get_args(model.model_fields["type"].annotation)[0]
        assert documented[name] == _data_cell(model), name


def test_the_page_names_only_built_in_types_and_reads_them_from_the_schema() -> None:
    script = (ROOT / "orchestrator" / "server" / "static" / "app.js").read_text()
    named = set(re.findall(r'case "([a-z_]+)"', script)) | set(re.findall(r'ev\.type === "([a-z_]+)"', script))
    assert named and named <= BUILTIN_EVENT_TYPES
    assert 'fetch("/schema/events")' in script and "discriminator.mapping" in script


async def test_a_finish_error_fits_its_model(chat: Any) -> None:
    """One of two built-in types no other test makes the runtime publish (the other: model_fallback)."""
    thread = await chat([answer({"role": "assistant", "content": "Partial"}, finish="error")])
    with contextlib.suppress(Exception):
        await thread.send("Hi")
    ended = [e for e in await asyncio.wait_for(_watch(thread), 15) if e.type == "model_finish_error"]
    assert len(ended) == 1 and isinstance(parse_event(ended[0]), ModelFinishErrorEvent)


async def test_a_fallback_fits_its_model(make_runtime: Any) -> None:

    scripted = {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}
    config = {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {"demo": {**scripted, "fallbacks": ["spare"]}, "spare": scripted},
        "default_model": "demo",
    }
    runtime, _ = await make_runtime(_defs(), [ScriptedFault(500), *CONVERSATION], config=config)
    thread = await runtime.create_thread("demo")
    await thread.run()
    fallbacks = [e for e in await runtime.storage.events_after(thread.id, 0) if e.type == "model_fallback"]
    assert len(fallbacks) == 1
    typed = parse_event(fallbacks[0])
    assert isinstance(typed, ModelFallbackEvent) and (typed.data.from_, typed.data.to) == ("demo", "spare")


async def test_a_tool_emitting_a_built_in_event_of_the_wrong_shape_gets_an_error(
    make_runtime: Any, monkeypatch: Any
) -> None:
    """Checked in `state.emit` whatever the bus does (here its debug check is off): clients act on
    built-in events, so a tool may not send `execution_stopped` shaped as it likes."""
    monkeypatch.delenv("ORCHESTRATOR_CHECK_EVENTS")

    async def forge(state: Any, args: OrderArgs) -> ToolResult:
        state.emit("execution_stopped", {"reason": "forged"})
        return ToolResult.ok("sent")

    defs = definitions(
        tools={"forge": define_tool(description="Forge an event", args=OrderArgs, execute=forge)},
        prompts={"p": define_prompt(prompt="p", tool_description="p", tools=("forge",))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("p"))},
    )
    runtime, _ = await make_runtime(defs, [R(tool_calls=[C("forge", {"order_id": "1"})]), R(text="ok")])
    thread = await runtime.create_thread("chat")
    await thread.send("go")
    tool = next(m for m in (await thread.get_messages()).messages if m.role == "tool")
    assert tool.tool_status == "error" and "'execution_stopped' is a built-in event" in (tool.content or "")
    stored = await runtime.storage.events_after(thread.id, 0)
    assert {"reason": "forged"} not in [e.data for e in stored if e.type == "execution_stopped"]
