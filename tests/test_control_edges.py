"""The edges of the loop's control flow (issue 16): a stop said at any moment,
closing a runtime under a running execution, a tool's own TimeoutError,
who stopped an execution, nested steps in the counters, and env defaults of
parallel prompt-as-tool calls."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support import Q, definitions, wait_until_cancelled

from orchestrator import Side, define_agent, define_hook, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall


async def _noted(state: Any, args: Q) -> dict:
    return {"status": "success", "result": f"noted {args.q}"}


def _duo(turns: int = 3) -> Any:
    prompts = {
        "pa": define_prompt(prompt="side a", tool_description="a", tools=("note",)),
        "pb": define_prompt(prompt="side b", tool_description="b"),
    }
    agents = {
        "duo": define_agent(type="dual_ai", side_a=Side("pa", max_steps=3), side_b=Side("pb"), max_session_turns=turns),
        "chat": define_agent(type="ai_human", side_a=Side("pa")),
    }
    return definitions(
        tools={"note": define_tool(description="n", args=Q, execute=_noted)}, prompts=prompts, agents=agents
    )


CONVERSATION = [R(tool_calls=[C("note", {"q": "1"})]), R(text="a done"), R(text="b"), R(text="a again")]


# -- 1. a stop said right after start is kept ---------------------------------------


@pytest.mark.parametrize("spins", [0, 1])
async def test_stop_soon_after_run_ends_it_before_any_model_request(make_runtime: Any, spins: int) -> None:
    rt, model = await make_runtime(_duo(), CONVERSATION)
    thread = await rt.create_thread("duo")
    task = asyncio.create_task(thread.run())
    for _ in range(spins):
        await asyncio.sleep(0)
    assert thread.stop() is True
    result = await asyncio.wait_for(task, 30)
    assert model.requests == [] and result.step_count == 0
    assert (result.reason, result.stopped_by) == ("stopped", "caller")
    assert (await thread.refresh()).status == "stopped"
    again = await asyncio.wait_for(thread.run(), 30)  # the kept stop was used up: the next run is not stopped
    assert again.reason == "max_session_turns" and len(model.requests) == 4


@pytest.mark.parametrize("spins", [0, 1])
async def test_stop_soon_after_send_keeps_the_message_and_asks_no_model(make_runtime: Any, spins: int) -> None:
    rt, model = await make_runtime(_duo(), [R(text="never")])
    thread = await rt.create_thread("chat")
    task = asyncio.create_task(thread.send("hello"))
    for _ in range(spins):
        await asyncio.sleep(0)
    thread.stop()
    result = await asyncio.wait_for(task, 30)
    assert model.requests == [] and result.reason == "stopped"
    assert [m.content for m in (await thread.get_messages()).messages] == ["hello"]


async def test_stop_once_the_message_is_stored_asks_no_model(make_runtime: Any) -> None:
    """Said between the person's message and the model request (counted in loop spins this was a race
    with the storage thread: one call to begin an execution leaves the request fewer spins away)."""
    handle: list[Any] = []

    def stop_now(state: Any, message: Any) -> None:
        if message.role == "user":
            handle[0].stop()

    defs = _duo()
    defs.hooks["after_create_message"] = define_hook("after_create_message", stop_now).named("after_create_message")
    rt, model = await make_runtime(defs, [R(text="never")])
    thread = await rt.create_thread("chat")
    handle.append(thread)
    result = await asyncio.wait_for(thread.send("hello"), 30)
    assert model.requests == [] and (result.reason, result.stopped_by) == ("stopped", "caller")
    assert [m.content for m in (await thread.get_messages()).messages] == ["hello"]


async def test_stop_while_waiting_for_the_lease_is_applied_once_it_is_taken(make_runtime: Any) -> None:
    rt, model = await make_runtime(_duo(), CONVERSATION)
    thread = await rt.create_thread("duo")
    gate, waiting = asyncio.Event(), asyncio.Event()
    begin = rt.storage.begin_execution  # takes the lease

    async def slow_begin(*args: Any, **kwargs: Any) -> Any:
        waiting.set()
        await gate.wait()
        return await begin(*args, **kwargs)

    rt.storage.begin_execution = slow_begin  # type: ignore[method-assign]
    task = asyncio.create_task(thread.run())
    await asyncio.wait_for(waiting.wait(), 30)
    assert thread.execution is None and thread.stop("not now") is True
    gate.set()
    result = await asyncio.wait_for(task, 30)
    assert model.requests == [] and (result.reason, result.stopped_by) == ("not now", "caller")


async def test_stop_once_the_lease_is_held_and_before_the_first_request_asks_no_model(make_runtime: Any) -> None:
    """The window a third case of the first test (ten loop iterations after `run()`) reached by timing
    alone, and missed once a new thread cost one storage call fewer: the execution holds its lease and
    is storing its start. A stop said now is said to the execution, which ends before any request."""
    rt, model = await make_runtime(_duo(), CONVERSATION)
    thread = await rt.create_thread("duo")
    gate, waiting = asyncio.Event(), asyncio.Event()
    commit = rt.storage.commit

    async def slow_first_commit(write: Any) -> Any:
        if not waiting.is_set():
            waiting.set()
            await gate.wait()
        return await commit(write)

    rt.storage.commit = slow_first_commit  # type: ignore[method-assign]
    task = asyncio.create_task(thread.run())
    await asyncio.wait_for(waiting.wait(), 30)
    assert thread.execution is not None and thread.stop() is True
    gate.set()
    result = await asyncio.wait_for(task, 30)
    assert model.requests == [] and result.step_count == 0
    assert (result.reason, result.stopped_by) == ("stopped", "caller")
    assert (await thread.refresh()).status == "stopped"


async def test_stop_with_nothing_started_is_not_kept_for_a_later_run(make_runtime: Any) -> None:
    rt, model = await make_runtime(_duo(turns=2), [R(text="a"), R(text="b")])
    thread = await rt.create_thread("duo")
    assert thread.stop() is False
    result = await thread.run()
    assert result.reason == "max_session_turns" and len(model.requests) == 2


async def test_a_refused_start_does_not_leave_its_stop_for_the_next_run(make_runtime: Any) -> None:
    rt, model = await make_runtime(_duo(turns=2), [R(text="a"), R(text="b"), R(text="hello")])
    thread = await rt.create_thread("chat")
    doomed = thread.run()  # wrong kind for an ai_human thread: refused when awaited
    thread.stop()
    with pytest.raises(TypeError):
        await doomed
    dual = await rt.create_thread("duo")
    assert (await dual.run()).reason == "max_session_turns"
    assert (await thread.send("hi")).reason == "rest"


async def test_server_stop_right_after_start_is_kept(make_runtime: Any) -> None:
    from orchestrator.server.runs import Runs

    rt, model = await make_runtime(_duo(), CONVERSATION)
    runs = Runs(rt)
    thread = await rt.create_thread("duo")
    task = runs.start(thread, None)
    assert runs.stop(await rt.get_thread(thread.id)) is True  # another handle on the same thread
    result = await asyncio.wait_for(task, 30)
    assert model.requests == [] and (result.reason, result.stopped_by) == ("stopped by user", "caller")


# -- 6. close() waits for its executions ---------------------------------------------


async def test_close_stops_and_waits_for_running_executions(make_runtime: Any) -> None:
    entered = asyncio.Event()

    async def slow(state: Any, args: Q) -> dict:
        entered.set()
        await asyncio.Event().wait()
        return {}

    defs = _duo()
    defs.tools["note"] = define_tool(description="n", args=Q, execute=slow).named("note")
    rt, _ = await make_runtime(defs, CONVERSATION)
    thread = await rt.create_thread("duo")
    task = asyncio.create_task(thread.run())
    await asyncio.wait_for(entered.wait(), 30)
    await rt.close()
    result = await task  # not StorageError: not open
    assert (result.reason, result.stopped_by) == ("runtime closed", "caller")
    await rt.open()
    assert (await rt.storage.get_thread(thread.id)).status == "stopped"


async def test_close_cancels_the_callers_task_of_an_execution_that_outlives_its_timeout(make_runtime: Any) -> None:
    """run() executes in the caller's task: an execution still busy past close()'s timeout (here in a hook,
    which a stop does not interrupt) is cancelled through that task, and close() returns."""
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def busy(state: Any, messages: list) -> list:
        await wait_until_cancelled(entered, cancelled)
        return messages

    defs = _duo()
    defs.hooks["prefilter_llm_history"] = define_hook("prefilter_llm_history", busy).named("prefilter_llm_history")
    rt, _ = await make_runtime(defs, CONVERSATION)
    thread = await rt.create_thread("duo")
    task = asyncio.create_task(thread.run())
    await asyncio.wait_for(entered.wait(), 30)
    await asyncio.wait_for(rt.close(timeout=0.05), 30)
    assert cancelled.is_set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)


# -- 7. a tool's own TimeoutError -----------------------------------------------------


async def test_tool_raising_timeout_error_itself_is_not_reported_as_our_timeout(make_runtime: Any) -> None:
    async def upstream(state: Any, args: Q) -> dict:
        raise TimeoutError("upstream API did not answer")

    defs = _duo()
    defs.tools["note"] = define_tool(description="n", args=Q, execute=upstream).named("note")
    rt, _ = await make_runtime(
        defs, [R(tool_calls=[C("note", {})]), R(text="ok")], settings=RuntimeSettings(tool_timeout=60)
    )
    thread = await rt.create_thread("chat")
    await thread.send("go")
    [result] = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert result.tool_status == "error"
    assert "timed out after" not in result.content and "TimeoutError: upstream API did not answer" in result.content


async def test_tool_over_its_timeout_is_still_reported_as_timed_out(make_runtime: Any) -> None:
    async def hang(state: Any, args: Q) -> dict:
        await asyncio.Event().wait()
        return {}

    defs = _duo()
    defs.tools["note"] = define_tool(description="n", args=Q, execute=hang, timeout=0.01).named("note")
    rt, _ = await make_runtime(defs, [R(tool_calls=[C("note", {})]), R(text="ok")])
    thread = await rt.create_thread("chat")
    await thread.send("go")
    [result] = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert result.content == "Tool 'note' timed out after 0.01 s"


# -- 9. parallel prompt-as-tool calls each read their own prompt's env -----------------


async def test_parallel_prompt_tool_calls_read_their_own_env_defaults(make_runtime: Any) -> None:
    both_running = asyncio.Barrier(2)
    seen: list[str] = []

    async def peek(state: Any, args: Q) -> dict:
        await both_running.wait()  # both nested prompts are inside their tools now
        seen.append(f"{args.q}={await state.env('API_KEY')}")
        return {"status": "success", "result": "peeked"}

    prompts = {
        "pa": define_prompt(prompt="side a", tool_description="a", tools=("p1", "p2")),
        "p1": define_prompt(prompt="inner p1", tool_description="p1", tools=("peek",), env={"API_KEY": "key-one"}),
        "p2": define_prompt(prompt="inner p2", tool_description="p2", tools=("peek",), env={"API_KEY": "key-two"}),
    }
    agents = {"chat": define_agent(type="ai_human", side_a=Side("pa"))}
    defs = definitions(
        tools={"peek": define_tool(description="p", args=Q, execute=peek)}, prompts=prompts, agents=agents
    )

    def script(body: dict[str, Any]) -> ScriptedResponse:
        system, last = body["messages"][0]["content"], body["messages"][-1]
        if system == "side a":
            return (
                R(text="done")
                if last["role"] == "tool"
                else R(tool_calls=[C("p1", {"message": "x"}), C("p2", {"message": "y"})])
            )
        return R(text="inner done") if last["role"] == "tool" else R(tool_calls=[C("peek", {"q": system.split()[-1]})])

    rt, _ = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    result = await asyncio.wait_for(thread.send("go"), 30)
    assert result.output == "done"
    assert sorted(seen) == ["p1=key-one", "p2=key-two"]


# -- 10. nested steps count for the side that called them --------------------------------


async def test_nested_steps_count_for_the_calling_side(make_runtime: Any) -> None:
    prompts = {
        "pa": define_prompt(prompt="side a", tool_description="a", tools=("helper",)),
        "pb": define_prompt(prompt="side b", tool_description="b"),
        "helper": define_prompt(prompt="helper", tool_description="h"),
    }
    agents = {
        "duo": define_agent(type="dual_ai", side_a=Side("pa", max_steps=2), side_b=Side("pb"), max_session_turns=2)
    }
    defs = definitions(prompts=prompts, agents=agents)
    script = [R(tool_calls=[C("helper", {"message": "help"})]), R(text="helped"), R(text="a done"), R(text="b")]
    rt, model = await make_runtime(defs, script)
    result = await (await rt.create_thread("duo")).run()
    assert len(model.requests) == 4
    assert (result.step_count, result.side_a_step_count, result.side_b_step_count) == (4, 3, 1)
    assert result.step_count == result.side_a_step_count + result.side_b_step_count


# -- 5. each result is stored as its call completes; idempotency keys -------------------


async def test_fast_result_is_stored_before_a_slow_call_ends_and_never_runs_again(make_runtime: Any) -> None:
    runs: list[tuple[str, str | None]] = []
    first_slow = asyncio.Event()

    async def fast(state: Any, args: Q) -> dict:
        runs.append(("fast", state.idempotency_key))
        return {"status": "success", "result": "fast done"}

    async def slow(state: Any, args: Q) -> dict:
        runs.append(("slow", state.idempotency_key))
        if not first_slow.is_set():
            first_slow.set()
            await asyncio.Event().wait()  # the process "dies" while this call runs
        return {"status": "success", "result": "slow done"}

    prompts = {
        "pa": define_prompt(prompt="side a", tool_description="a", tools=("slow", "fast")),
        "pb": define_prompt(prompt="side b", tool_description="b"),
    }
    agents = {"duo": define_agent(type="dual_ai", side_a=Side("pa"), side_b=Side("pb"), max_session_turns=2)}
    tools = {
        "fast": define_tool(description="f", args=Q, execute=fast),
        "slow": define_tool(description="s", args=Q, execute=slow),
    }
    script = [R(tool_calls=[C("slow", {}), C("fast", {})]), R(text="a done"), R(text="b")]
    rt, model = await make_runtime(definitions(tools=tools, prompts=prompts, agents=agents), script)
    thread = await rt.create_thread("duo")
    task = asyncio.create_task(thread.run())
    await asyncio.wait_for(first_slow.wait(), 30)
    for _ in range(500):  # the fast call's result is stored while the slow call still runs
        stored = [m.name for m in (await thread.get_messages()).messages if m.role == "tool"]
        if stored:
            break
        await asyncio.sleep(0.01)
    assert stored == ["fast"]
    task.cancel()  # what a crash leaves: the thread "running", the slow call without a result
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await thread.refresh()).status == "running"
    result = await asyncio.wait_for(thread.run(), 30)  # resumes the execution
    assert result.reason == "max_session_turns"
    assert [name for name, _ in runs] == ["slow", "fast", "slow"]  # fast, whose result was stored, did not run again
    keys = {name: {key for n, key in runs if n == name} for name in ("slow", "fast")}
    assert len(keys["slow"]) == 1 and None not in keys["slow"]  # the run again has the same key
    assert keys["slow"] != keys["fast"] and all(k.startswith(thread.id) for k in keys["slow"] | keys["fast"])
    assert len(model.requests) == 3
    # the model reads the results in call order, whatever order they were stored in
    assert [m["tool_call_id"] for m in model.requests[1]["messages"] if m["role"] == "tool"] == [
        c["id"] for c in model.requests[1]["messages"][2]["tool_calls"]
    ]


async def test_server_shutdown_stops_an_execution_still_being_started(make_runtime: Any) -> None:
    from orchestrator.server.runs import Runs

    rt, model = await make_runtime(_duo(), CONVERSATION)
    runs = Runs(rt)
    task = runs.start(await rt.create_thread("duo"), None)
    await runs.shutdown()
    result = task.result()
    assert model.requests == [] and (result.reason, result.stopped_by) == ("server shutting down", "caller")
