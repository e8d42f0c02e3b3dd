"""What an execution asks of storage: every call is a hop to SQLite's thread (or a round trip to
PostgreSQL) on the conversation's critical path, so the executor makes as few as its durability
points need. Model: the scripted OpenAI-wire model (the runtime's own wire reader parses it)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support import Q, definitions

from orchestrator import Side, define_agent, define_hook, define_prompt, define_tool
from orchestrator.storage import StepWrite
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse


async def _noted(state: Any, args: Q) -> dict:
    return {"status": "success", "result": f"noted {args.q}"}


def _chat(hooks: dict[str, Any] | None = None) -> Any:
    return definitions(
        tools={"note": define_tool(description="n", args=Q, execute=_noted)},
        prompts={"pa": define_prompt(prompt="side a", tool_description="a", tools=("note",))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
        hooks=hooks or {},
    )


def _record(storage: Any, calls: list[str], writes: list[StepWrite]) -> None:
    """Wrap the storage's public methods to note each call (and each committed write)."""
    names = ("create_thread", "append_events", "begin_execution", "acquire_lease", "get_thread", "get_messages")
    for name in (*names, "commit", "release_lease"):
        inner = getattr(storage, name, None)
        if inner is None:
            continue

        async def noted(*args: Any, _name: str = name, _inner: Any = inner, **kwargs: Any) -> Any:
            calls.append(_name)
            if _name == "commit":
                writes.append(copy.deepcopy(args[0]))  # the thread record it holds changes after the commit
            return await _inner(*args, **kwargs)

        setattr(storage, name, noted)


async def test_an_answer_costs_one_call_to_begin_and_three_commits(make_runtime: Any) -> None:
    rt, _ = await make_runtime(_chat(), [R(text="hello")])
    thread = await rt.create_thread("chat")
    calls: list[str] = []
    writes: list[StepWrite] = []
    _record(rt.storage, calls, writes)

    result = await thread.send("hi")

    assert result.output == "hello"
    # the lease, the thread and its history in one call; the person's message, the answer, the end;
    # the handle's record is the one the last commit stored, not read back
    assert calls == ["begin_execution", "commit", "commit", "commit", "release_lease"]
    assert thread.record == await rt.storage.get_thread(thread.id)
    assert thread.record.status == "idle" and thread.record.execution is not None
    assert [[m.role for m in w.new_messages] for w in writes] == [["user"], ["assistant"], []]
    end = writes[-1]  # the turn's end and the execution's, stored together
    assert end.thread is not None and end.thread.status == "idle"
    assert [e.type for e in end.events][-2:] == ["turn_ended", "execution_stopped"]


async def test_a_new_thread_is_stored_with_its_thread_created_event_in_one_call(make_runtime: Any) -> None:
    """Before: the thread's insert, then `thread_created` written on its own by a background flush, a
    second storage call queued in front of the first execution's."""
    rt, _ = await make_runtime(_chat(), [R(text="hello")])
    calls: list[str] = []
    _record(rt.storage, calls, [])

    thread = await rt.create_thread("chat", user_id="u1")

    assert calls == ["create_thread"]
    [created] = await rt.storage.events_after(thread.id, 0)  # stored by the time create_thread returns
    assert (created.seq, created.type, created.data) == (1, "thread_created", {"agent": "chat", "user_id": "u1"})
    await thread.send("hi")
    assert calls == ["create_thread", "begin_execution", "commit", "commit", "commit", "release_lease"]
    assert [e.seq for e in await rt.storage.events_after(thread.id, 0)][:2] == [1, 2]


async def test_tool_results_finished_together_are_stored_in_one_commit(make_runtime: Any) -> None:
    seen: list[tuple[str, str]] = []
    hooks = {
        "after_tool_call_success": define_hook(
            "after_tool_call_success", lambda state, call, result: seen.append(("after", call.id))
        ),
    }
    calls = [ScriptedCall("note", {"q": "1"}), ScriptedCall("note", {"q": "2"})]
    rt, _ = await make_runtime(_chat(hooks), [R(tool_calls=calls), R(text="done")])
    thread = await rt.create_thread("chat")
    writes: list[StepWrite] = []
    _record(rt.storage, [], writes)

    await thread.send("hi")

    ids = [c.id for w in writes for m in w.new_messages for c in m.tool_calls or ()]
    results = [w for w in writes if any(m.role == "tool" for m in w.new_messages)]
    assert len(results) == 1, "both results in one transaction"
    assert [(m.tool_call_id, m.content) for m in results[0].new_messages] == list(
        zip(ids, ["noted 1", "noted 2"], strict=True)
    )
    assert seen == [("after", i) for i in ids]  # each call still gets its hook, in call order
    stored = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert [m.tool_call_id for m in stored] == ids and stored[0].seq + 1 == stored[1].seq
    events = await rt.storage.events_after(thread.id, 0)
    assert [e.data["tool_call_id"] for e in events if e.type == "tool_result"] == ids


def _duo(hooks: dict[str, Any] | None = None, turns: int = 4) -> Any:
    return definitions(
        tools={"note": define_tool(description="n", args=Q, execute=_noted)},
        prompts={
            "pa": define_prompt(prompt="side a", tool_description="a", tools=("note",)),
            "pb": define_prompt(prompt="side b", tool_description="b"),
        },
        agents={"duo": define_agent(type="dual_ai", side_a=Side("pa"), side_b=Side("pb"), max_session_turns=turns)},
        hooks=hooks or {},
    )


async def test_a_turns_end_is_stored_with_the_next_turns_step(make_runtime: Any) -> None:
    """Before: a commit of its own between every two turns (the snapshot's new side and turn count,
    `turn_ended`, `turn_started`), half the commits of a dual_ai session whose turns are one answer
    each. The next step's commit stores the same thread and events."""
    rt, model = await make_runtime(_duo(), [R(text=f"answer {i}") for i in range(4)])
    thread = await rt.create_thread("duo")
    calls: list[str] = []
    writes: list[StepWrite] = []
    _record(rt.storage, calls, writes)

    result = await thread.run()

    assert result.reason == "max_session_turns" and len(model.requests) == 4
    # the switch to running, one commit per turn's answer, the end
    assert calls == ["begin_execution", *["commit"] * 6, "release_lease"]
    answers = writes[1:5]
    assert [
        (w.new_messages[0].side, w.thread.execution.turn_count) for w in answers if w.thread and w.thread.execution
    ] == [
        ("a", 0),
        ("b", 1),
        ("a", 2),
        ("b", 3),
    ]
    log = [e.type for e in await rt.storage.events_after(thread.id, 0)]
    assert log.count("turn_started") == 4 and log.count("turn_ended") == 4
    assert log.index("turn_ended") < log.index("turn_started", log.index("turn_started") + 1)


async def test_a_forced_side_is_stored_before_its_turn(make_runtime: Any) -> None:
    """A resume derives an ended turn from its last stored step, but not a side forced by a caller:
    that one is stored (the thread's snapshot, no message) before the forced side's first request."""

    def force(state: Any, message: Any) -> None:
        if message.role == "assistant" and message.side == "a" and message.content == "answer 0":
            state.execution.force_turn("a")

    hooks = {"after_create_message": define_hook("after_create_message", force)}
    rt, model = await make_runtime(_duo(hooks, turns=2), [R(text="answer 0"), R(text="answer 1")])
    thread = await rt.create_thread("duo")
    writes: list[StepWrite] = []
    _record(rt.storage, [], writes)

    await thread.run()

    assert [m["content"] for m in model.requests[1]["messages"] if m["role"] == "assistant"] == ["answer 0"]
    forced = writes[2]  # after the switch to running and side a's first answer
    assert forced.new_messages == [] and forced.thread is not None and forced.thread.execution is not None
    assert (forced.thread.execution.current_side, forced.thread.execution.turn_count) == ("a", 1)


async def test_a_failure_between_a_turns_end_and_the_next_commit_resumes_with_the_next_side(
    make_runtime: Any,
) -> None:
    """The ended turn is not stored on its own: the execution that resumes finds side a's answer as
    the last stored step and ends side a's turn again, so side a is not asked twice."""
    from orchestrator.storage import StorageError

    rt, model = await make_runtime(_duo(turns=2), [R(text="from a"), R(text="from b"), R(text="from b again")])
    thread = await rt.create_thread("duo")
    commit = rt.storage.commit
    failed: list[StepWrite] = []

    async def failing_once(write: StepWrite) -> Any:
        if not failed and any(m.side == "b" for m in write.new_messages):
            failed.append(write)
            raise StorageError("disk I/O error")
        return await commit(write)

    rt.storage.commit = failing_once  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        await thread.run()
    assert (await rt.storage.get_thread(thread.id)).status == "running"

    result = await thread.run()  # resumes

    assert result.reason == "max_session_turns" and len(model.requests) == 3
    assert [m.content for m in (await thread.get_messages()).messages] == ["from a", "from b again"]
    assert [m["content"] for m in model.requests[2]["messages"] if m["role"] != "system"] == ["from a"]
    # the failed attempt's turn_ended (a) and turn_started (b) reached the log as it ended; not announced twice
    log = [(e.type, e.data.get("side")) for e in await rt.storage.events_after(thread.id, 0)]
    turns = [t for t in log if t[0] in ("turn_started", "turn_ended")]
    assert turns == [("turn_started", "a"), ("turn_ended", "a"), ("turn_started", "b"), ("turn_ended", "b")]
    assert log.count(("step_started", "b")) == 2  # a step asked again is announced again
