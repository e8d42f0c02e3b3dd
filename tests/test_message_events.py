"""A message and its event in one write: the bus numbers a message's event before the write that stores the
message, and storage writes the event with the seq it gives the message, in the same transaction. Before,
the event was published after the commit and written by the next one: a process dying in between left a
message with no event, and every resume read the thread's whole event log to publish the missing ones
again (`_republish_missing`). Now a resume reads only the log's tail (for the turn events a failed attempt
logged), and no event is lost or announced twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from storage_backends import fake_clock, msg, new_thread, storage, storage_factory  # noqa: F401 - fixtures
from support import Crash, definitions

from orchestrator import Side, define_agent, define_hook, define_prompt
from orchestrator.core.event_payloads import EmittedEventName
from orchestrator.core.messages import Event, Message, MessageEvents, ThreadRecord
from orchestrator.core.secrets import SecretScopes
from orchestrator.engine.resume import TAIL_PAGE
from orchestrator.storage import StepWrite, Storage, StorageError
from orchestrator.storage.events import EventBus
from orchestrator.storage.sqlite import SQLiteStorage
from providers.scripted import ScriptedResponse

R = ScriptedResponse


def _duo(turns: int, hooks: dict[str, Any] | None = None) -> Any:
    return definitions(
        prompts={
            "pa": define_prompt(prompt="side a", tool_description="a"),
            "pb": define_prompt(prompt="side b", tool_description="b"),
        },
        agents={"duo": define_agent(type="dual_ai", side_a=Side("pa"), side_b=Side("pb"), max_session_turns=turns)},
        hooks=hooks or {},
    )


def _check_log(log: list[Event], messages: list[Message], turns: int) -> None:
    """Every message announced once, every turn started and ended once, seqs strictly increasing."""
    created = Counter(e.data["id"] for e in log if e.type in ("message_created", "tool_result"))
    assert created == Counter(m.id for m in messages)
    assert Counter(e.data["turn"] for e in log if e.type == "turn_started") == Counter(range(1, turns + 1))
    assert [e.data["side"] for e in log if e.type == "turn_ended"] == ["a", "b"] * (turns // 2)
    assert [e.seq for e in log] == sorted({e.seq for e in log})


async def test_a_message_is_stored_with_its_event_when_the_process_dies_right_after(make_runtime: Any) -> None:
    process = {"crashed": False, "dead": False}

    def die_after_the_answer(state: Any, message: Message) -> None:
        if message.role == "assistant" and not process["crashed"]:
            process["crashed"] = process["dead"] = True
            raise Crash  # the process dies right after the step's commit: nothing else of it is written

    rt, model = await make_runtime(
        _duo(2, {"after_create_message": define_hook("after_create_message", die_after_the_answer)}),
        [R(text="from a"), R(text="from b")],
    )
    thread = await rt.create_thread("duo")
    commit, append = rt.storage.commit, rt.storage.append_events

    async def unless_dead(write: Any, *args: Any) -> Any:
        if process["dead"]:
            raise StorageError("the process is gone")
        return await (commit(write) if isinstance(write, StepWrite) else append(write))

    rt.storage.commit = rt.storage.append_events = unless_dead  # type: ignore[method-assign]
    with pytest.raises(Crash):
        await thread.run()

    [answer] = [m for m in (await thread.get_messages()).messages if m.role == "assistant"]
    log = await rt.storage.events_after(thread.id, 0)
    assert [(e.data["id"], e.data["seq"]) for e in log if e.type == "message_created"] == [(answer.id, answer.seq)]
    process["dead"] = False  # the next process

    assert (await thread.run()).reason == "max_session_turns"
    assert len(model.requests) == 2  # side a's stored answer was not asked again
    _check_log(await rt.storage.events_after(thread.id, 0), (await thread.get_messages()).messages, 2)


async def test_a_resume_reads_the_logs_tail_not_the_whole_log(make_runtime: Any) -> None:
    """A step's commit fails late in a long thread, after the turn before it ended: the bus writes that
    turn's end and the next turn's start as the execution ends. The resume finds them in the log's tail
    and announces neither again."""
    turns = 60
    rt, model = await make_runtime(_duo(turns), [R(text=f"answer {i}") for i in range(turns + 1)])
    thread = await rt.create_thread("duo")
    commit = rt.storage.commit
    failed: list[StepWrite] = []

    async def failing_once(write: StepWrite) -> Any:
        if not failed and any(m.content == f"answer {turns - 5}" for m in write.new_messages):
            failed.append(write)
            raise StorageError("disk I/O error (injected)")
        return await commit(write)

    rt.storage.commit = failing_once  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        await thread.run()
    logged = len(await rt.storage.events_after(thread.id, 0))
    assert logged > 2 * TAIL_PAGE  # a long log: reading it whole would take three pages

    reads: list[tuple[int, int]] = []
    events_after = rt.storage.events_after

    async def counted(thread_id: str, after: int, limit: int | None = None) -> list[Event]:
        found = await events_after(thread_id, after, limit)
        reads.append((after, len(found)))
        return found

    rt.storage.events_after = counted  # type: ignore[method-assign]
    assert (await thread.run()).reason == "max_session_turns"
    rt.storage.events_after = events_after  # type: ignore[method-assign]

    assert len(reads) == 1 and reads[0][0] >= logged - TAIL_PAGE, reads  # one page, from the end
    assert len(model.requests) == turns + 1  # the failed step asked again, nothing else
    _check_log(await rt.storage.events_after(thread.id, 0), (await thread.get_messages()).messages, turns)


# -- the bus: a message's event held until its write returns -----------------------------


class _Gate:
    """Wraps `storage.commit`: a write with new messages waits until the test opens the gate, then
    `outcome` says what happens: "ok", "fails" (before anything is stored) or "cancelled" (stored,
    but the caller is cancelled before it hears so, as a task cancelled mid-commit is)."""

    def __init__(self, storage: Storage, outcome: str) -> None:
        self._commit = storage.commit
        self.outcome = outcome
        self.waiting = asyncio.Event()
        self.open = asyncio.Event()

    async def __call__(self, write: StepWrite) -> list[Message]:
        if not write.new_messages:
            return await self._commit(write)
        self.waiting.set()
        await self.open.wait()
        if self.outcome == "fails":
            raise StorageError("disk I/O error (injected)")
        stored = await self._commit(write)
        if self.outcome == "cancelled":
            raise asyncio.CancelledError
        return stored


async def _commit(bus: EventBus, storage: Storage, write: StepWrite) -> list[Message]:
    """What `Services.store_messages` does around its write."""
    bus.prepare(write, "message_created")
    try:
        stored = await storage.commit(write)
    except BaseException as exc:
        bus.not_stored(write, exc)
        raise
    bus.stored(write, stored)
    return stored


async def _watch(bus: EventBus, thread_id: str, until: str, seen: list[Event]) -> None:
    async for event in bus.subscribe(thread_id):
        seen.append(event)
        if event.type == until:
            return


@pytest.mark.parametrize("outcome", ["ok", "fails", "cancelled"])
async def test_what_is_published_while_a_message_is_stored_goes_out_after_its_event(
    tmp_path: Path, outcome: str
) -> None:
    async with SQLiteStorage(str(tmp_path / "bus.db")) as storage:
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        bus = EventBus(storage, SecretScopes([]))
        await bus.attach(thread.id, new=True)
        seen: list[Event] = []
        watcher = asyncio.create_task(_watch(bus, thread.id, "last", seen))
        await asyncio.sleep(0)
        gate = _Gate(storage, outcome)
        storage.commit = gate  # type: ignore[method-assign]
        bus.publish(thread.id, EmittedEventName("before"), {"n": 1}, defer=True)
        message = Message(thread_id=thread.id, role="user", content="hello")
        writing = asyncio.create_task(_commit(bus, storage, StepWrite(thread_id=thread.id, new_messages=[message])))
        await gate.waiting.wait()
        bus.publish(thread.id, EmittedEventName("during"), {"n": 2})  # numbered after the message's event
        await asyncio.sleep(0.01)
        assert [e.type for e in seen] == ["before"]  # held behind the message's event
        gate.open.set()
        with pytest.raises(BaseException) if outcome != "ok" else _nothing():
            await writing
        await bus.flush(thread.id)
        bus.publish(thread.id, EmittedEventName("last"), None)
        await bus.flush(thread.id)
        await asyncio.wait_for(watcher, 5)

        log = await storage.events_after(thread.id, 0)
        if outcome == "fails":  # neither the message nor its event; its number stays unused
            expected = [(1, "before"), (3, "during"), (4, "last")]
        else:
            expected = [(1, "before"), (2, "message_created"), (3, "during"), (4, "last")]
        assert [(e.seq, e.type) for e in seen] == expected  # live, in the log's order
        assert [(e.seq, e.type) for e in log] == expected
        if outcome != "fails":
            [stored] = (await storage.get_messages(thread.id)).messages
            assert seen[1].data == log[1].data == stored.model_dump(mode="json")


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def test_a_messages_event_is_redacted_like_any_other(tmp_path: Path) -> None:
    async with SQLiteStorage(str(tmp_path / "bus.db")) as storage:
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        scopes = SecretScopes([])
        scopes.add("sk-secret-123456", thread.id)
        bus = EventBus(storage, scopes)
        await bus.attach(thread.id, new=True)
        message = Message(thread_id=thread.id, role="assistant", content="the key is sk-secret-123456")
        [stored] = await _commit(bus, storage, StepWrite(thread_id=thread.id, new_messages=[message]))
        [event] = await storage.events_after(thread.id, 0)
        assert stored.content == "the key is sk-secret-123456"  # the message keeps what the model said
        assert event.data["content"] == "the key is ***" and event.data["seq"] == stored.seq


# -- storage: the write gives the event its message's seq, on both backends ---------------------


async def test_a_writes_message_events_carry_the_seqs_it_gives_its_messages(storage: Storage) -> None:
    thread = await new_thread(storage)
    await storage.commit(StepWrite(thread.id, [msg(thread.id, "first")]))  # seq 1, no event
    messages = [msg(thread.id, "second"), msg(thread.id, "third")]
    bodies = [MessageEvents.body(m.model_dump(mode="json")) for m in messages]
    announced = MessageEvents(thread.id, [(7, "message_created", 1.0, bodies[0]), (8, "tool_result", 2.0, bodies[1])])
    stored = await storage.commit(StepWrite(thread.id, messages, message_events=announced))

    assert [m.seq for m in stored] == [2, 3]
    log = await storage.events_after(thread.id, 0)
    assert [(e.seq, e.type, e.at) for e in log] == [(7, "message_created", 1.0), (8, "tool_result", 2.0)]
    assert [e.data for e in log] == [m.model_dump(mode="json") for m in stored]


async def test_message_events_that_do_not_match_the_new_messages_are_refused(storage: Storage) -> None:
    thread = await new_thread(storage)
    body = MessageEvents.body(msg(thread.id, "x").model_dump(mode="json"))
    announced = MessageEvents(thread.id, [(1, "message_created", 1.0, body)])
    with pytest.raises(ValueError, match="one per new message"):
        await storage.commit(StepWrite(thread.id, [msg(thread.id, "a"), msg(thread.id, "b")], message_events=announced))
    assert (await storage.get_messages(thread.id)).messages == [] and await storage.events_after(thread.id, 0) == []
