"""`LiveExecutions` (orchestrator/engine/live.py): the one owner of which execution of a
thread runs in this process and of the controls said before it runs. Python
callers, the server's `Runs` and the Temporal activity all go through it, so
what one path says, the others see."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest
from support import definitions

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.core.messages import ExecutionSnapshot
from orchestrator.definitions.thread_state import ExecutionState
from orchestrator.engine.live import LiveExecutions
from orchestrator.server.runs import Runs
from orchestrator.storage import ThreadBusyError
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall


def _execution() -> ExecutionState:
    return ExecutionState(ExecutionSnapshot(flow_id="flow_test"), [])


# -- the owner on its own -------------------------------------------------------------


def test_a_side_forced_at_rest_is_applied_by_the_next_start() -> None:
    live = LiveExecutions()
    assert live.force_turn("t1", "b") is False  # nothing runs: kept for the next start
    execution = _execution()
    live.started("t1", execution)
    assert execution.snapshot.forced_side == "b"
    assert live.get("t1") is execution and live.running("t1")
    later = _execution()
    live.ended("t1", execution)
    live.started("t1", later)
    assert later.snapshot.forced_side is None  # used up by the first start


def test_only_the_registered_execution_ends_it() -> None:
    """A start refused next to a running one (two Temporal attempts in one worker)
    must not unregister the one that runs."""
    live = LiveExecutions()
    first, refused = _execution(), _execution()
    live.started("t1", first)
    live.ended("t1", refused)
    assert live.get("t1") is first
    assert live.force_turn("t1", "a") is True and first.snapshot.forced_side == "a"
    live.ended("t1", first)
    assert live.get("t1") is None and not live.running("t1")


def test_a_stop_said_while_starting_is_kept_for_that_start_only() -> None:
    live = LiveExecutions()
    assert live.stop("t1", "early") is False  # nothing runs, nothing starts
    ticket = live.announce("t1")
    assert live.stop("t1", "early") is True
    execution = _execution()
    ticket.settle(execution)
    assert execution.stopped and execution.snapshot.reason == "early" and execution.stopped_by == "caller"
    ticket.settle(None)  # settled once: a second settle changes nothing
    given_up = live.announce("t1")
    live.stop("t1", "late")
    given_up.settle(None)  # nobody left to apply it to: dropped
    again = live.announce("t1")
    fresh = _execution()
    again.settle(fresh)
    assert not fresh.stopped


def test_a_bad_side_is_refused_even_at_rest() -> None:
    with pytest.raises(ValueError, match="side must be"):
        LiveExecutions().force_turn("t1", "c")  # type: ignore[arg-type]


# -- through the runtime, the server and Python -------------------------------------


async def _slow(state: Any) -> dict:
    await asyncio.Event().wait()  # until the stop cancels it
    return {"status": "success", "result": "late"}


def _duo() -> Any:
    return definitions(
        tools={"wait": define_tool(description="waits", execute=_slow)},
        prompts={
            "pa": define_prompt(prompt="side a", tool_description="a", tools=("wait",)),
            "pb": define_prompt(prompt="side b", tool_description="b"),
        },
        agents={"duo": define_agent(type="dual_ai", side_a=Side("pa"), side_b=Side("pb"), max_session_turns=1)},
    )


async def test_a_side_forced_through_the_server_applies_to_a_run_started_from_python(make_runtime: Any) -> None:
    """Before: the server kept its own forced sides, applied only by its own starts."""
    rt, model = await make_runtime(_duo(), [R(text="b speaks first")])
    runs = Runs(rt)
    thread = await rt.create_thread("duo")
    assert runs.force_turn(thread, "b") is False
    result = await asyncio.wait_for((await rt.get_thread(thread.id)).run(), 30)  # another handle, not the server
    assert (result.side_a_step_count, result.side_b_step_count) == (0, 1)
    assert model.requests[0]["messages"][0]["content"] == "side b"


async def test_the_server_sees_and_refuses_beside_an_execution_started_from_python(make_runtime: Any) -> None:
    rt, _ = await make_runtime(_duo(), [R(tool_calls=[C("wait", {})])])
    runs = Runs(rt)
    thread = await rt.create_thread("duo")
    task = await thread.start()  # returns once the execution holds the lease: it is live now
    live = rt.live.get(thread.id)
    assert live is not None and thread.execution is live and runs.running(thread.id)
    with pytest.raises(ThreadBusyError):
        runs.start(thread, None)  # a second concurrent start is refused
    assert runs.force_turn(thread, "b") is True  # said to the running execution
    assert live.snapshot.forced_side == "b"
    assert runs.stop(thread) is True
    result = await asyncio.wait_for(task, 30)
    assert result.reason == "stopped by user" and result.stopped_by == "caller"
    assert not runs.running(thread.id) and rt.live.get(thread.id) is None


async def test_the_handle_shows_the_running_executions_record_and_lets_its_stale_one_go(make_runtime: Any) -> None:
    """Before: the handle kept the record it was made with (status "idle") for the whole execution, beside
    the one the execution keeps current: a second record and its usage per conversation in flight."""
    rt, _ = await make_runtime(_duo(), [R(tool_calls=[C("wait", {})])])
    thread = await rt.create_thread("duo")
    stale = weakref.ref(thread.record)
    task = await thread.start()
    await asyncio.sleep(0)
    assert thread.record.status == "running" and thread.record.execution is not None
    gc.collect()
    assert stale() is None, "the handle's record from before the start is still held"
    thread.stop()
    result = await asyncio.wait_for(task, 30)
    assert result.reason == "stopped" and thread.record.status == "stopped"
    assert rt.live.get(thread.id) is None and not rt._tasks, "the execution's task was not let go"
