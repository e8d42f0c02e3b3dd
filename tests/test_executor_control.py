"""Stop conditions, force_turn, stop and abort, retries: the loop's control flow."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from support import definitions, wait_until_cancelled

from orchestrator import Side, define_agent, define_hook, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from providers.client import ModelClient
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedFault, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall


class Q(BaseModel):
    q: str = ""


STARTED = asyncio.Event


def _defs(
    tools: dict[str, Any],
    a: Side,
    b: Side | None = None,
    *,
    agent_type: str = "dual_ai",
    turns: int | None = None,
    a_tools=(),
    b_tools=(),
    hooks=None,
):
    prompts = {
        "pa": define_prompt(prompt="side a", tool_description="a", tools=tuple(a_tools)),
        "pb": define_prompt(prompt="side b", tool_description="b", tools=tuple(b_tools)),
    }
    agent = define_agent(type=agent_type, side_a=a, side_b=b, max_session_turns=turns)  # type: ignore[arg-type]
    return definitions(tools=tools, prompts=prompts, agents={"ag": agent}, hooks=hooks)


async def _ok(state: Any, args: Q) -> dict:
    return {"status": "success", "result": f"ok {args.q}"}


ok_tool = define_tool(description="ok", args=Q, execute=_ok)


async def test_max_session_turns_ends_dual_ai(make_runtime: Any) -> None:
    defs = _defs({}, Side("pa"), Side("pb"), turns=3)
    rt, model = await make_runtime(defs, [R(text="a1"), R(text="b1"), R(text="a2"), R(text="never")])
    result = await (await rt.create_thread("ag")).run()
    assert result.reason == "max_session_turns" and result.step_count == 3 and len(model.requests) == 3


async def test_stop_tool_ends_turn_and_max_steps_bounds_it(make_runtime: Any) -> None:
    defs = _defs(
        {"ok": ok_tool, "done": ok_tool},
        Side("pa", stop_tool="done"),
        Side("pb", max_steps=2),
        turns=3,
        a_tools=("ok", "done"),
        b_tools=("ok",),
    )
    script = [
        R(tool_calls=[C("ok", {"q": "1"})]),
        R(tool_calls=[C("done", {})]),  # a: tool, then its stop tool
        R(tool_calls=[C("ok", {})]),
        R(tool_calls=[C("ok", {})]),  # b: max_steps=2 ends the turn
        R(text="a again"),
    ]
    rt, _ = await make_runtime(defs, script)
    thread = await rt.create_thread("ag")
    result = await thread.run()
    assert (result.side_a_step_count, result.side_b_step_count) == (3, 2)
    ends = [e.data["reason"] for e in await rt.storage.events_after(thread.id, 0) if e.type == "turn_ended"]
    assert ends == ["stop_tool", "max_steps", "response"]


async def test_force_turn_takes_effect_after_current_step(make_runtime: Any) -> None:
    async def force(state: Any, args: Q) -> dict:
        state.execution.force_turn("a")
        return {"status": "success", "result": "forced"}

    defs = _defs(
        {"force": define_tool(description="f", args=Q, execute=force)},
        Side("pa", max_steps=5),
        Side("pb"),
        turns=3,
        a_tools=("force",),
    )
    # a calls force (turn ends after this step, a again), then a answers, then b
    rt, model = await make_runtime(defs, [R(tool_calls=[C("force", {})]), R(text="a second turn"), R(text="b")])
    thread = await rt.create_thread("ag")
    result = await thread.run()
    sides = [e.data["side"] for e in await rt.storage.events_after(thread.id, 0) if e.type == "turn_started"]
    assert sides == ["a", "a", "b"]
    assert result.reason == "max_session_turns"


async def test_stop_mid_stream_stores_nothing_half_written_and_thread_runs_again(make_runtime: Any) -> None:
    defs = _defs({}, Side("pa"), Side("pb"), turns=2)
    rt, model = await make_runtime(
        defs, [R(text="this stream hangs", chunk_size=3, hang_after=3), R(text="a"), R(text="b")]
    )
    thread = await rt.create_thread("ag")

    async def stop_on_first_delta() -> None:
        async for e in thread.events():
            if e.type == "text_delta":
                thread.stop()
                return

    stopper = asyncio.create_task(stop_on_first_delta())
    result = await asyncio.wait_for(thread.run(), 60)
    await stopper
    assert result.reason == "stopped" and result.stopped_by == "caller"
    assert (await thread.get_messages()).total == 0  # the half-streamed answer is not stored
    assert model.streams_closed == model.streams_opened == 1  # the HTTP stream was closed
    assert thread.record.status == "stopped"
    again = await thread.run()
    assert again.reason == "max_session_turns" and [m.content for m in (await thread.get_messages()).messages] == [
        "a",
        "b",
    ]


async def test_stop_mid_tool_cancels_the_tool(make_runtime: Any) -> None:
    cancelled = asyncio.Event()
    entered = asyncio.Event()

    async def forever(state: Any, args: Q) -> dict:
        await wait_until_cancelled(entered, cancelled)
        return {}

    defs = _defs(
        {"slow": define_tool(description="s", args=Q, execute=forever)},
        Side("pa"),
        agent_type="ai_human",
        a_tools=("slow",),
    )
    rt, _ = await make_runtime(defs, [R(tool_calls=[C("slow", {})])])
    thread = await rt.create_thread("ag")
    run = asyncio.create_task(thread.send("go"))
    await asyncio.wait_for(entered.wait(), 60)
    thread.stop()
    result = await asyncio.wait_for(run, 60)
    assert cancelled.is_set() and result.reason == "stopped"
    stored = (await thread.get_messages()).messages
    assert [m.role for m in stored] == ["user", "assistant"]  # the call, but no result from the cancelled tool


async def test_retry_after_429_honoured_then_success(make_runtime: Any) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    config = {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {
            "demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 3, "backoff": 0.1, "max_wait": 10}}
        },
        "default_model": "demo",
    }
    defs = _defs({}, Side("pa"), agent_type="ai_human")
    rt, model = await make_runtime(
        defs, [ScriptedFault(status=429, headers={"retry-after": "3"}), R(text="hello")], config=config
    )
    rt.services.client = ModelClient(config_from_dict(config), sleep=fake_sleep)
    thread = await rt.create_thread("ag")
    result = await thread.send("hi")
    assert result.output == "hello" and slept == [3.0] and len(model.requests) == 2
    assert [m.content for m in (await thread.get_messages()).messages] == ["hi", "hello"]


async def test_stream_cut_midway_is_retried_without_duplicates(make_runtime: Any) -> None:
    async def no_sleep(_: float) -> None:
        return None

    config = {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 3}}},
        "default_model": "demo",
    }
    defs = _defs({}, Side("pa"), agent_type="ai_human")
    rt, _ = await make_runtime(
        defs, [R(text="partial answer that breaks", chunk_size=4, cut_after=3), R(text="whole answer")], config=config
    )
    rt.services.client = ModelClient(config_from_dict(config), sleep=no_sleep)
    thread = await rt.create_thread("ag")
    result = await thread.send("hi")
    assert result.output == "whole answer"
    messages = (await thread.get_messages()).messages
    assert [m.content for m in messages] == ["hi", "whole answer"]
    kinds = [e.type for e in await rt.storage.events_after(thread.id, 0)]
    assert kinds.count("stream_restarted") == 1 and kinds.count("message_created") == 2


async def test_injection_during_history_assembly_goes_to_next_request(make_runtime: Any) -> None:
    injected = []

    async def prefilter(state: Any, messages: list[dict]) -> list[dict]:
        if not injected:
            injected.append(await state.inject_message("system", "late context"))
        return messages

    defs = _defs(
        {},
        Side("pa"),
        agent_type="ai_human",
        hooks={"prefilter_llm_history": define_hook("prefilter_llm_history", prefilter)},
    )
    rt, model = await make_runtime(defs, [R(text="one"), R(text="two")])
    thread = await rt.create_thread("ag")
    await thread.send("first")
    assert all(m.get("content") != "late context" for m in model.requests[0]["messages"])
    await thread.send("second")
    assert {"role": "system", "content": "late context"} in model.requests[1]["messages"]


async def test_second_execution_on_busy_thread_is_refused(make_runtime: Any) -> None:
    from orchestrator.storage import ThreadBusyError

    entered = asyncio.Event()

    async def slow(state: Any, args: Q) -> dict:
        entered.set()
        await asyncio.sleep(3600)
        return {}

    defs = _defs(
        {"slow": define_tool(description="s", args=Q, execute=slow)},
        Side("pa"),
        agent_type="ai_human",
        a_tools=("slow",),
    )
    rt, _ = await make_runtime(defs, [R(tool_calls=[C("slow", {})])], settings=RuntimeSettings(tool_timeout=3600))
    thread = await rt.create_thread("ag")
    run = asyncio.create_task(thread.send("go"))
    await asyncio.wait_for(entered.wait(), 60)
    other = await rt.get_thread(thread.id)
    try:
        await other.send("again")
        raise AssertionError("expected ThreadBusyError")
    except ThreadBusyError as exc:
        assert thread.id in str(exc)
    thread.stop()
    await run
