"""Tests that run with no key: one on the offline `test` model, one replaying a recorded conversation."""

import contextlib

import pytest
import respx
from recorded import QUESTION, RECORDED

from orchestrator import Runtime
from providers.scripted import ScriptedModel


@pytest.mark.asyncio
async def test_weather_chat_runs_offline(tmp_path):
    runtime = Runtime.from_path("agents", config="configs/default.yaml", storage=str(tmp_path / "t.db"), model="test")
    async with runtime:
        thread = await runtime.create_thread("weather_chat")
        result = await thread.send(QUESTION)
        assert result.output
        assert await thread.state.get_value("last_city")  # the test model called lookup_weather


@pytest.mark.asyncio
async def test_replays_a_recorded_conversation(agent_runtime):
    """Offline: the cassette answers. With --record-mode=all the scripted model answers and is recorded again."""
    agent_runtime.model = "recorded"
    scripted = contextlib.nullcontext() if agent_runtime.replaying else respx.mock(assert_all_called=False)
    if not agent_runtime.replaying:
        ScriptedModel(RECORDED).mount(scripted)
    with scripted:
        async with agent_runtime as runtime:
            thread = await runtime.create_thread("weather_chat")
            result = await thread.send(QUESTION)
            await agent_runtime.assert_tool_calls(thread, [("lookup_weather", {"city": "Oslo"})])
            await agent_runtime.assert_values(thread, {"last_city": "Oslo"})
    assert result.output == "It is 21 C and sunny in Oslo."


@pytest.mark.asyncio
async def test_a_forecast_mail_waits_for_approval(tmp_path):
    runtime = Runtime.from_path("agents", config="configs/default.yaml", storage=str(tmp_path / "t.db"), model="test")
    async with runtime:
        thread = await runtime.create_thread("weather_mail")
        result = await thread.send("Mail me the weather in Oslo")
        assert result.reason == "awaiting_approval"  # the test model calls every tool: send_forecast waits
        [call] = await thread.waiting_calls()
        assert call.tool == "send_forecast"
        result = await (await thread.approve(call.call_id))  # the resumed execution
        assert result.output
        assert await thread.state.get_value("forecast_sent_to") == call.arguments["email"]


@pytest.mark.asyncio
async def test_a_rejected_forecast_mail_is_not_sent(tmp_path):
    runtime = Runtime.from_path("agents", config="configs/default.yaml", storage=str(tmp_path / "t.db"), model="test")
    async with runtime:
        thread = await runtime.create_thread("weather_mail")
        await thread.send("Mail me the weather in Oslo")
        [call] = await thread.waiting_calls()
        result = await (await thread.reject(call.call_id, "not to that address"))
        assert result.output
        assert await thread.state.get_value("forecast_sent_to") is None
