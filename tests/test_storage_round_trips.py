"""What an execution asks of storage: every call is a hop to SQLite's thread (or a round trip to
PostgreSQL) on the conversation's critical path, so the executor makes as few as its durability
points need. Model: the scripted OpenAI-wire model (the runtime's own wire reader parses it)."""

from __future__ import annotations

from typing import Any

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
                writes.append(args[0])
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
