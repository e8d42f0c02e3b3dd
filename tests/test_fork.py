"""Time travel on both stores: a dual_ai thread with tool calls, KV and env changes and attachments,
forked at several points and rewound; the scripted model's recorded requests say what each sent."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel
from storage_backends import StorageFactory, fake_clock, storage_factory  # noqa: F401
from support import definitions

from orchestrator import Side, ToolAttachment, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.messages import Message
from orchestrator.runtime import Runtime, Thread
from orchestrator.storage.base import ThreadBusyError
from orchestrator.storage.history import HistoryPointError
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

R = ScriptedResponse
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


class NoteArgs(BaseModel):
    n: int


async def _note(state: Any, args: NoteArgs) -> ToolResult:
    await state.set_value("count", args.n)
    await state.set_value(f"seen_{args.n}", True)
    await state.set_env("MOOD", f"mood-{args.n}", "text")
    picture = ToolAttachment(name=f"p{args.n}.png", mime_type="image/png", data=base64.b64encode(PNG).decode())
    return ToolResult(status="success", result=f"noted {args.n}", attachments=[picture])


async def _end(state: Any) -> ToolResult:
    return ToolResult(status="success", result="bye")


def _defs() -> Any:
    return definitions(
        tools={
            "note": define_tool(description="Note a number", args=NoteArgs, execute=_note),
            "end_chat": define_tool(description="End the chat", execute=_end),
        },
        prompts={
            "pa": define_prompt(prompt="You are side a.", tool_description="a", tools=("note",)),
            "pb": define_prompt(prompt="You are side b.", tool_description="b", tools=("end_chat",)),
        },
        agents={
            "demo": define_agent(
                type="dual_ai", side_a=Side("pa", max_steps=4), side_b=Side("pb", end_conversation_tool="end_chat")
            )
        },
    )


class Script:
    """Answers in order from `queue`; once it is empty, side a says "again" and side b ends the chat."""

    def __init__(self) -> None:
        self.queue: list[R] = []

    def __call__(self, request: dict[str, Any]) -> R:
        if self.queue:
            return self.queue.pop(0)
        if "side a" in request["messages"][0]["content"]:
            return R(text="again")
        return R(tool_calls=[ScriptedCall("end_chat", {})])


FIRST = [
    R(tool_calls=[ScriptedCall("note", {"n": 1})]),  # a: a step with a call, then its result
    R(text="A1"),  # a ends its turn
    R(text="B1"),  # b
    R(tool_calls=[ScriptedCall("note", {"n": 2})]),  # a
    R(text="A2"),
]


@pytest.fixture
async def world(make_runtime: Any, storage_factory: StorageFactory) -> tuple[Runtime, ScriptedModel, Script]:
    script = Script()
    rt, model = await make_runtime(_defs(), script, storage=storage_factory.make())
    return rt, model, script


async def _conversation(rt: Runtime, script: Script) -> Thread:
    script.queue[:] = list(FIRST)
    thread = await rt.create_thread("demo")
    await thread.run()  # ends when b calls end_chat
    return thread


def _body(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(exclude={"thread_id"}) for m in messages]


async def _history(thread: Thread) -> list[Message]:
    return (await thread.get_messages(include_silent=True)).messages


async def _seq_of(thread: Thread, predicate: Callable[[Message], bool]) -> int:
    return next(m.seq for m in await _history(thread) if predicate(m))


async def test_fork_at_several_points_equals_the_original_as_of_then(world: Any) -> None:
    rt, _, script = world
    original = await _conversation(rt, script)
    before = _body(await _history(original))
    first_result = await _seq_of(original, lambda m: m.role == "tool" and m.content == "noted 1")
    a1 = await _seq_of(original, lambda m: m.content == "A1")
    second_result = await _seq_of(original, lambda m: m.role == "tool" and m.content == "noted 2")
    for at, count, mood in ((first_result, 1, "mood-1"), (a1, 1, "mood-1"), (second_result, 2, "mood-2")):
        fork = await original.fork(at)
        assert (fork.record.forked_from, fork.record.forked_at) == (original.id, at)
        assert fork.record.agent_id == "demo" and fork.record.status == "idle"
        assert _body(await _history(fork)) == [m for m in before if m["seq"] <= at]
        state = fork.state
        assert await state.get_value("count") == count
        assert await state.get_value("seen_2") is (True if count == 2 else None)
        assert await state.env("MOOD") == mood
        for message in await _history(fork):
            for ref in message.attachments:
                stored, data = await rt.storage.get_file(fork.id, ref.id)
                assert data == PNG and stored.name == ref.name
    assert _body(await _history(original)) == before  # the original is untouched
    assert await original.state.get_value("count") == 2


async def test_fork_inside_a_step_is_refused_naming_the_nearest_points(world: Any) -> None:
    rt, _, script = world
    original = await _conversation(rt, script)
    call = await _seq_of(original, lambda m: bool(m.tool_calls) and m.tool_calls[0].name == "note")
    with pytest.raises(HistoryPointError) as refused:
        await original.fork(call)
    assert refused.value.seq == call and refused.value.after == call + 1
    assert f"message {call} " in str(refused.value) and "inside a step" in str(refused.value)
    with pytest.raises(HistoryPointError, match="no message with seq 999"):
        await original.fork(999)


async def test_fork_and_original_continue_independently_and_send_what_a_fresh_thread_sends(world: Any) -> None:
    rt, model, script = world
    original = await _conversation(rt, script)
    a1 = await _seq_of(original, lambda m: m.content == "A1")  # side a's turn ended: side b is next
    fork = await original.fork(a1)
    assert fork.record.execution is not None and fork.record.execution.next_side == "b"

    sent = len(model.requests)
    await fork.run()
    fork_first = model.requests[sent]

    fresh = await rt.create_thread("demo")
    copies = [m.model_copy(update={"thread_id": fresh.id}) for m in await _history(original) if m.seq <= a1]
    await rt.storage.append_messages(fresh.id, copies)
    fresh.force_turn("b")
    sent = len(model.requests)
    await fresh.run()
    assert model.requests[sent] == fork_first  # byte for byte the same request body
    assert "side b" in fork_first["messages"][0]["content"]

    untouched = _body(await _history(original))
    script.queue[:] = [R(text="original goes on")]
    await original.run()
    assert [m.content for m in await _history(original)][len(untouched) :][:1] == ["original goes on"]
    fork_texts = [m.content for m in await _history(fork)]
    assert "original goes on" not in fork_texts and "B1" not in fork_texts


async def test_rewind_supersedes_later_messages_and_values_and_they_never_reach_a_model(world: Any) -> None:
    rt, model, script = world
    thread = await _conversation(rt, script)
    a1 = await _seq_of(thread, lambda m: m.content == "A1")
    later = [m for m in await _history(thread) if m.seq > a1]
    superseded = await thread.rewind(a1)
    assert superseded == len(later)
    assert [m.seq for m in await _history(thread)][-1] == a1
    kept = (await thread.get_messages(include_silent=True, include_superseded=True)).messages
    assert [m.seq for m in kept if m.superseded] == [m.seq for m in later]
    assert await thread.state.get_value("count") == 1
    assert await thread.state.get_value("seen_2") is None
    assert await thread.state.env("MOOD") == "mood-1"
    assert thread.record.status == "idle"

    sent = len(model.requests)
    script.queue[:] = [R(text="B again")]
    await thread.run()
    new_requests = model.requests[sent:]
    assert new_requests and "side b" in new_requests[0]["messages"][0]["content"]
    for request in new_requests:
        texts = [str(m.get("content")) for m in request["messages"]]
        assert "B1" not in texts and "A2" not in texts and "noted 2" not in texts
    events = await rt.storage.events_after(thread.id, 0)
    assert any(e.type == "thread_rewound" and e.data == {"to": a1, "superseded": len(later)} for e in events)

    # a fork after the rewind sees the values as restored, not the superseded ones
    last = (await _history(thread))[-1].seq
    fork = await thread.fork(last)
    assert await fork.state.get_value("count") == 1 and await fork.state.get_value("seen_2") is None


async def test_rewind_is_refused_while_an_execution_holds_the_thread(world: Any) -> None:
    rt, _, script = world
    thread = await _conversation(rt, script)
    a1 = await _seq_of(thread, lambda m: m.content == "A1")
    lease = await rt.storage.acquire_lease(thread.id, "another-process/exec", 30.0)
    with pytest.raises(ThreadBusyError, match="has an execution running"):
        await thread.rewind(a1)
    await rt.storage.release_lease(lease)
    assert await thread.rewind(a1) > 0
