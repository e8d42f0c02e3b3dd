"""Definitions are checked when made; the shipped example tools run against a fake state."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from pydantic import BaseModel, Field

from orchestrator import (
    DefinitionError,
    Side,
    ToolResult,
    define_agent,
    define_prompt,
    define_tool,
)
from orchestrator.definitions.loader import Definitions, load_definitions
from orchestrator.definitions.schema import SchemaError


async def _execute(state: Any, args: Any) -> ToolResult:
    return ToolResult(status="success")


class Args(BaseModel):
    order_id: str = Field(description="Order ID")
    count: int = 1
    note: str | None = None


class Dated(BaseModel):
    when: dt.datetime


# --------------------------------------------------------------------------
# define-time checks
# --------------------------------------------------------------------------


def test_define_tool_refuses_unsupported_args_with_path() -> None:
    class Outer(BaseModel):
        window: Dated

    with pytest.raises(SchemaError, match=r"Outer\.window\.when: datetime is not supported"):
        define_tool(description="x", args=Outer, execute=_execute)


def test_define_prompt_and_agent_check_args_too() -> None:
    with pytest.raises(SchemaError, match=r"Dated\.when"):
        define_prompt(prompt="p", tool_description="d", args=Dated)
    with pytest.raises(SchemaError, match=r"Dated\.when"):
        define_agent(type="ai_human", side_a=Side("p"), args=Dated)


def test_progress_argument_must_be_a_top_level_string() -> None:
    tool = define_tool(description="x", args=Args, execute=_execute, progress_argument="order_id")
    assert tool.progress_argument == "order_id"
    with pytest.raises(DefinitionError, match="must be a string argument"):
        define_tool(description="x", args=Args, execute=_execute, progress_argument="count")
    with pytest.raises(DefinitionError, match="must be a string argument"):
        define_tool(description="x", args=Args, execute=_execute, progress_argument="note")  # Optional
    with pytest.raises(DefinitionError, match="must name a top-level argument"):
        define_tool(description="x", args=Args, execute=_execute, progress_argument="missing")


def test_uses_is_a_tuple_of_names() -> None:
    tool = define_tool(description="x", args=Args, execute=_execute, uses=["a", "b"])
    assert tool.uses == ("a", "b")
    with pytest.raises(DefinitionError, match="tuple of tool names"):
        define_tool(description="x", args=Args, execute=_execute, uses="send_notification")


def test_named_returns_a_copy_with_the_name() -> None:
    tool = define_tool(description="x", args=Args, execute=_execute)
    named = tool.named("lookup")
    assert named.name == "lookup" and tool.name is None


# --------------------------------------------------------------------------
# the shipped examples
# --------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


class FakeState:
    """Just enough ThreadState for the examples: values, env, queue, injections, events."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.values: dict[str, Any] = {}
        self.env_values = dict(env or {})
        self.queued: list[tuple[str, dict[str, Any]]] = []
        self.injected: list[dict[str, Any]] = []
        self.emitted: list[tuple[str, Any]] = []

    async def get_value(self, key: str) -> Any:
        return self.values.get(key)

    async def set_value(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))  # JSON-serialisable, like the real store

    async def env(self, name: str) -> str:
        if name not in self.env_values:
            raise KeyError(f"env value {name!r} is not set")
        return self.env_values[name]

    def queue_tool(self, name: str, args: dict[str, Any]) -> None:
        self.queued.append((name, args))

    async def inject_message(self, role: str, content: str, silent: bool = False, metadata: Any = None) -> Any:
        self.injected.append({"role": role, "content": content, "silent": silent})

    def emit(self, event: str, data: Any) -> None:
        self.emitted.append((event, data))


@pytest.fixture(scope="module")
def examples() -> Definitions:
    return load_definitions(REPO / "agents")


async def run(examples: Definitions, name: str, state: FakeState, **args: Any) -> ToolResult:
    tool = examples.tools[name]
    if tool.args is None:
        return await tool.execute(state)
    return await tool.execute(state, tool.args.model_validate(args))


async def test_lookup_order(examples: Definitions) -> None:
    assert examples.tools["lookup_order"].progress_argument == "order_id"
    found = await run(examples, "lookup_order", FakeState(), order_id="a1002")
    assert found.status == "success"
    assert json.loads(found.result or "")["status"] == "processing"
    missing = await run(examples, "lookup_order", FakeState(), order_id="Z9")
    assert missing.status == "error" and "Z9 not found" in (missing.error or "")


async def test_get_current_time(examples: Definitions) -> None:
    assert examples.tools["get_current_time"].args is None
    result = await run(examples, "get_current_time", FakeState())
    when = dt.datetime.fromisoformat(result.result or "")
    assert when.tzinfo is not None
    assert abs((dt.datetime.now(dt.UTC) - when).total_seconds()) < 60


async def test_process_order_queues_a_notification(examples: Definitions) -> None:
    assert examples.tools["process_order"].uses == ("send_notification",)
    state = FakeState()
    result = await run(examples, "process_order", state, order_id="A1001", action="ship")
    assert result.status == "success" and "shipped" in (result.result or "")
    assert state.queued == [("send_notification", {"customer_id": "C001", "message": "Order A1001 has been shipped"})]
    assert state.values["order_status:A1001"] == "shipped"
    queued_args = examples.tools["send_notification"].args.model_validate(state.queued[0][1])  # type: ignore[union-attr]
    assert queued_args.customer_id == "C001"  # type: ignore[attr-defined]


async def test_send_notification_records_and_emits(examples: Definitions) -> None:
    state = FakeState()
    await run(examples, "send_notification", state, customer_id="C002", message="Hello")
    await run(examples, "send_notification", state, customer_id="C002", message="Again")
    assert [n["message"] for n in state.values["notifications"]] == ["Hello", "Again"]
    assert state.emitted[0] == ("notification", {"customer_id": "C002", "message": "Hello"})


async def test_update_context_sets_a_value_and_injects_a_message(examples: Definitions) -> None:
    state = FakeState()
    result = await run(examples, "update_context", state, context_type="preferences", data_json='{"lang": "pt"}')
    assert result.status == "success"
    assert state.values["context:preferences"] == {"lang": "pt"}
    assert state.injected == [{"role": "system", "content": 'Updated preferences: {"lang": "pt"}', "silent": False}]
    bad = await run(examples, "update_context", FakeState(), context_type="history", data_json="{nope")
    assert bad.status == "error" and "not valid JSON" in (bad.error or "")


async def test_end_chat(examples: Definitions) -> None:
    result = await run(examples, "end_chat", FakeState(), reason="issue resolved")
    assert result.result == "Conversation ended: issue resolved"


async def test_lookup_customer_creates_and_queries_sqlite(examples: Definitions, tmp_path: Path) -> None:
    db = tmp_path / "db" / "customers.sqlite"
    state = FakeState({"CUSTOMER_DB_PATH": str(db)})
    by_id = await run(examples, "lookup_customer", state, customer_id="C001")
    assert db.exists()
    assert json.loads(by_id.result or "")["email"] == "ana@example.com"
    by_email = await run(examples, "lookup_customer", state, email="KWAME@example.com")
    assert json.loads(by_email.result or "")["id"] == "C002"
    missing = await run(examples, "lookup_customer", state, customer_id="C999")
    assert (missing.status, missing.error) == ("error", "Customer not found")
    neither = await run(examples, "lookup_customer", state)
    assert neither.status == "error" and "required" in (neither.error or "")


async def test_lookup_customer_defaults_when_env_is_missing(
    examples: Definitions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = tmp_path / "default.sqlite"
    monkeypatch.setitem(examples.tools["lookup_customer"].execute.__globals__, "DEFAULT_DB_PATH", default)
    result = await run(examples, "lookup_customer", FakeState(), customer_id="C003")
    assert result.status == "success" and default.exists()


WEATHER_KEY = "sk-weather-SECRET-123"
WEATHER_ENV = {"WEATHER_API_BASE": "http://weather.test/v1", "WEATHER_API_KEY": WEATHER_KEY}


def _assert_no_key(result: ToolResult) -> None:
    assert WEATHER_KEY not in result.model_dump_json()


async def test_get_weather_declares_its_secret(examples: Definitions) -> None:
    variables = {v.name: v.type for v in examples.tools["get_weather"].variables}
    assert variables == {"WEATHER_API_KEY": "secret", "WEATHER_API_BASE": "text"}


async def test_get_weather_success(examples: Definitions) -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.get("http://weather.test/v1/current").respond(200, json={"temperature": 21, "conditions": "sunny"})
        result = await run(examples, "get_weather", FakeState(WEATHER_ENV), city="Lisbon")
    assert result.result == "Weather in Lisbon: 21°C, sunny"
    request = route.calls.last.request
    assert request.url.params["key"] == WEATHER_KEY and request.url.params["units"] == "metric"
    _assert_no_key(result)


async def test_get_weather_http_error_hides_the_key(examples: Definitions) -> None:
    with respx.mock() as mock:
        mock.get("http://weather.test/v1/current").respond(500, text=f"bad key {WEATHER_KEY}")
        result = await run(examples, "get_weather", FakeState(WEATHER_ENV), city="Lisbon")
    assert (result.status, result.error) == ("error", "Weather API error: HTTP 500")
    _assert_no_key(result)


async def test_get_weather_transport_error_hides_the_key(examples: Definitions) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url}", request=request)

    with respx.mock() as mock:
        mock.get("http://weather.test/v1/current").mock(side_effect=fail)
        result = await run(examples, "get_weather", FakeState(WEATHER_ENV), city="Lisbon")
    assert result.status == "error" and "ConnectError" in (result.error or "")
    assert "[redacted]" in (result.error or "")
    _assert_no_key(result)


async def test_get_weather_unexpected_body(examples: Definitions) -> None:
    with respx.mock() as mock:
        mock.get("http://weather.test/v1/current").respond(200, json={"temp": 1})
        result = await run(examples, "get_weather", FakeState(WEATHER_ENV), city="Lisbon")
    assert result.error == "Weather API sent an unexpected response"


async def test_get_weather_not_configured(examples: Definitions) -> None:
    result = await run(examples, "get_weather", FakeState({"WEATHER_API_BASE": "http://weather.test"}), city="X")
    assert result.error == "Weather is not configured: WEATHER_API_KEY is not set"


def test_example_prompts_and_agents(examples: Definitions) -> None:
    support = examples.prompts["support_agent"]
    assert support.model is None
    expected = {"lookup_order", "lookup_customer", "process_order", "get_current_time", "update_context"}
    assert set(support.tools) == expected
    assert examples.prompts["customer"].tools == ("end_chat",)
    demo = examples.agents["support_demo"]
    assert (demo.type, demo.max_session_turns) == ("dual_ai", 6)
    assert (demo.side_a.prompt, demo.side_a.max_steps) == ("support_agent", 8)
    assert (demo.side_b.prompt, demo.side_b.end_conversation_tool) == ("customer", "end_chat")  # type: ignore[union-attr]
    chat = examples.agents["support_chat"]
    assert chat.type == "ai_human" and chat.side_a.prompt == "support_agent"


async def test_update_device_settings_keeps_free_form_settings_as_sent(examples: Definitions) -> None:
    tool = examples.tools["update_device_settings"]
    assert tool.description == "Save settings for a customer's device, e.g. its APN."
    assert tool.args is not None and list(tool.args.model_fields) == ["customer_id", "settings", "mode"]
    state = FakeState()
    sent = {"apn": "internet.café", "mms": {"proxy": "", "port": 8080, "ratio": 1.0}, "bands": [3, 7, [20]]}
    result = await run(examples, "update_device_settings", state, customer_id="C001", settings=sent)
    assert result.result == "Saved 3 setting(s) for C001"
    assert json.dumps(state.values["device_settings:C001"]) == json.dumps(sent)
    await run(examples, "update_device_settings", state, customer_id="C001", settings={"apn": "ims"})
    assert state.values["device_settings:C001"]["apn"] == "ims" and "mms" in state.values["device_settings:C001"]
    await run(examples, "update_device_settings", state, customer_id="C001", settings={}, mode="replace")
    assert state.values["device_settings:C001"] == {}
    with pytest.raises(ValueError, match="customer_id"):
        tool.args.model_validate({"customer_id": "bob", "settings": {}})
