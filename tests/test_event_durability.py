"""The event log has no gaps: a durable event whose write failed stays pending
until a later write stores it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from pathlib import Path
from typing import Any

import pytest
from support import Q, definitions

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.core.messages import ThreadRecord
from orchestrator.core.secrets import SecretScopes
from orchestrator.storage import StepWrite, StorageError
from orchestrator.storage.events import EPHEMERAL_EVENTS, EventBus
from orchestrator.storage.sqlite import SQLiteStorage
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall


class _FailOnce:
    """Wraps a storage write method: the first call matching `when` fails."""

    def __init__(self, write: Any, when: Any = lambda *a: True) -> None:
        self._write = write
        self._when = when
        self.failed = 0

    async def __call__(self, *args: Any) -> Any:
        if not self.failed and self._when(*args):
            self.failed += 1
            raise StorageError("disk I/O error (injected)")
        return await self._write(*args)


async def test_bus_write_failure_keeps_events_until_stored(tmp_path: Path) -> None:
    async with SQLiteStorage(str(tmp_path / "bus.db")) as storage:
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        bus = EventBus(storage, SecretScopes([]))
        await bus.attach(thread.id, new=True)
        storage.append_events = _FailOnce(storage.append_events)  # type: ignore[method-assign]
        bus.publish(thread.id, "first", {"n": 1})
        await asyncio.sleep(0.01)  # the background write runs and fails
        assert storage.append_events.failed == 1 and await storage.events_after(thread.id, 0) == []
        bus.publish(thread.id, "second", {"n": 2})
        await bus.flush(thread.id)
        assert [(e.seq, e.type) for e in await storage.events_after(thread.id, 0)] == [(1, "first"), (2, "second")]


def _defs() -> Any:
    async def note(state: Any, args: Q) -> dict:
        state.emit("noted", {"q": args.q})
        return {"status": "success", "result": "noted"}

    prompts = {"pa": define_prompt(prompt="side a", tool_description="a", tools=("note",))}
    agents = {"chat": define_agent(type="ai_human", side_a=Side("pa", max_steps=5))}
    return definitions(
        tools={"note": define_tool(description="n", args=Q, execute=note)}, prompts=prompts, agents=agents
    )


async def test_execution_event_log_has_no_gap_after_a_failed_write(make_runtime: Any) -> None:
    script = [R(tool_calls=[C("note", {"q": "1"})]), R(tool_calls=[C("note", {"q": "2"})]), R(text="done")]
    rt, _ = await make_runtime(_defs(), script)
    thread = await rt.create_thread("chat")
    live: list[Any] = []

    async def watch() -> None:
        async for event in thread.events():
            live.append(event)
            if event.type == "execution_stopped":
                return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)
    events_only = lambda write: not write.new_messages and write.thread is None and bool(write.events)  # noqa: E731
    failing = _FailOnce(rt.storage.commit, events_only)
    rt.storage.commit = failing  # type: ignore[method-assign]
    result = await thread.send("go")
    await asyncio.wait_for(watcher, 30)
    assert result.output == "done" and failing.failed == 1  # a bus write of events did fail
    durable = [e.seq for e in live if e.type not in EPHEMERAL_EVENTS]
    stored = [e.seq for e in await rt.storage.events_after(thread.id, 0)]
    assert stored == durable  # every durable event that went out live is in the log
    assert [e.data["q"] for e in await rt.storage.events_after(thread.id, 0) if e.type == "noted"] == ["1", "2"]


@pytest.mark.parametrize("failures", [{2: "after"}, {3: "after"}, {1: "before", 2: "after"}, {3: "before", 4: "after"}])
async def test_a_commit_whose_answer_was_lost_leaves_a_thread_the_next_send_continues(
    make_runtime: Any, failures: dict[int, str]
) -> None:
    """A commit went through and its answer was lost (PostgreSQL's connection dropped after COMMIT): the
    bus takes the commit's events back, and a later write carries them again. Whichever write that is, the
    events already in the log are not a conflict. Before, when the lost write was the bus's own (the flush
    at an execution's end, after a step's commit had failed), the next execution's first commit failed whole
    on their seqs (DuplicateEventError), and the next send with it."""
    script = [R(tool_calls=[C("note", {"q": "1"})]), R(text="first done"), R(text="second done")]
    rt, _ = await make_runtime(_defs(), script)
    thread = await rt.create_thread("chat")
    commit = rt.storage.commit
    calls: list[str] = []

    async def failing(write: Any) -> Any:
        calls.append(failures.get(len(calls) + 1, "ok"))
        if calls[-1] == "before":
            raise StorageError("disk I/O error (injected)")
        stored = await commit(write)
        if calls[-1] == "after":
            raise StorageError("connection lost after COMMIT (injected)")
        return stored

    rt.storage.commit = failing  # type: ignore[method-assign]
    with contextlib.suppress(StorageError):  # a step's commit fails the send; the bus's own writes do not
        await thread.send("go")
    rt.storage.commit = commit  # type: ignore[method-assign]
    assert set(failures.values()) <= set(calls)  # every failure asked for happened
    assert (await thread.send("again")).reason == "rest"
    log = await rt.storage.events_after(thread.id, 0)
    assert [e.seq for e in log] == sorted({e.seq for e in log})
    messages = [m.content for m in (await thread.get_messages()).messages if m.role != "assistant"]
    assert "again" in messages and len(messages) == len(set(messages))


async def test_an_executions_start_goes_live_only_once_it_is_stored(make_runtime: Any) -> None:
    """Before: `execution_started` went live when published, ahead of the commit that stores it with
    the thread's `running` status. A worker dying in between left clients told of a start that never
    happened; with a broker the stream then carried it into the log, and the next worker's execution
    announced a second, unrelated start (tests/test_multiprocess.py caught it: two flows, neither
    resumed). Now it waits, like an execution's end, for the commit that stores it."""
    rt, _ = await make_runtime(_defs(), [R(text="done")])
    thread = await rt.create_thread("chat")
    live: list[str] = []

    async def watch() -> None:
        async for event in thread.events():
            live.append(event.type)
            if event.type == "execution_stopped":
                return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)
    seen_before_commit: list[list[str]] = []
    commit = rt.storage.commit

    async def watched_commit(write: Any) -> Any:
        if any(e.type == "execution_started" for e in write.events):
            for _ in range(10):
                await asyncio.sleep(0)  # every subscriber has had its turn
            seen_before_commit.append(list(live))
        return await commit(write)

    rt.storage.commit = watched_commit  # type: ignore[method-assign]
    await thread.send("go")
    await asyncio.wait_for(watcher, 30)

    assert seen_before_commit == [["thread_created"]]
    assert live.count("execution_started") == 1 and live.index("execution_started") == 1
    assert [e.type for e in await rt.storage.events_after(thread.id, 0)][:2] == ["thread_created", "execution_started"]


async def test_failed_step_commit_hands_its_events_back(make_runtime: Any) -> None:
    rt, _ = await make_runtime(_defs(), [R(text="hello")])
    thread = await rt.create_thread("chat")
    with_message = lambda write: bool(write.new_messages)  # noqa: E731
    failing = _FailOnce(rt.storage.commit, with_message)
    rt.storage.commit = failing  # type: ignore[method-assign]
    try:
        await thread.send("go")
    except StorageError:
        pass
    assert failing.failed == 1
    await rt.services.bus.flush(thread.id)
    types = [e.type for e in await rt.storage.events_after(thread.id, 0)]
    assert types[:2] == ["thread_created", "execution_started"]  # taken by the failed commit, stored after all


async def test_events_another_process_already_stored_are_not_written_again(tmp_path: Path) -> None:
    from orchestrator.core.messages import Event

    async with SQLiteStorage(str(tmp_path / "bus.db")) as storage:
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        bus = EventBus(storage, SecretScopes([]))
        await bus.attach(thread.id, new=True)
        await storage.append_events([Event(thread_id=thread.id, seq=1, type="theirs", at=1.0)])  # another publisher's
        bus.publish(thread.id, "mine", {"n": 1}, defer=True)
        bus.publish(thread.id, "mine", {"n": 2}, defer=True)
        with pytest.raises(StorageError):
            await bus.flush(thread.id)  # seq 1 is taken: the batch is rolled back whole
        await bus.flush(thread.id)  # seq 2 was kept and goes now; seq 1 is not retried for ever
        assert [(e.seq, e.type) for e in await storage.events_after(thread.id, 0)] == [(1, "theirs"), (2, "mine")]


async def test_two_processes_sharing_a_file_take_turns_on_a_thread_without_a_broker(
    make_runtime: Any, tmp_path: Path
) -> None:
    """Without a broker, each process numbers a thread's events from its own memory. An execution
    takes up the numbering from the log under its lease: a process that created the thread (and kept
    its channel) must not number its next execution's events from before another process ran it.
    Before, its `execution_started` took a seq already in the log and the send failed
    (DuplicateEventError), at every later send of that process."""
    db = str(tmp_path / "shared.db")
    here, _ = await make_runtime(_defs(), lambda body: R(text="ok"), db=db)
    there, _ = await make_runtime(_defs(), lambda body: R(text="ok"), db=db)  # one model answers both
    thread = await here.create_thread("chat")
    for text, runtime in [("one", there), ("two", here), ("three", there), ("four", here)]:
        assert (await (await runtime.get_thread(thread.id)).send(text)).reason == "rest"
    events = await here.storage.events_after(thread.id, 0)
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    assert [e.type for e in events].count("execution_started") == 4
    contents = [m.content for m in (await thread.get_messages()).messages]
    assert contents == ["one", "ok", "two", "ok", "three", "ok", "four", "ok"]


async def test_leftover_events_whose_seqs_the_log_took_do_not_fail_the_next_executions_commit(tmp_path: Path) -> None:
    """An execution here ended with events it could not write (storage failing); another process then ran
    the thread and stored its own events at those seqs. The next execution here takes up the numbering
    from the log (`attach(stored=...)`); before, its first commit also carried the leftovers and failed
    whole on their seqs, as did the send. Leftovers at free seqs are still written."""
    assert await leftovers_then_the_next_execution(tmp_path / "bus.db") == [
        (1, "theirs"),
        (2, "theirs"),
        (3, "mine"),
        (4, "next"),
    ]


async def leftovers_then_the_next_execution(path: Path, broker: Any = None) -> list[tuple[int, str]]:
    """Three events left unwritten here (seqs 1-3), another process's stored at seqs 1 and 2, then the
    next execution here attaches under its lease and commits twice; the log, as (seq, type)."""
    from orchestrator.core.messages import Event

    async with SQLiteStorage(str(path)) as storage:
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        bus = EventBus(storage, SecretScopes([]))
        bus.use_broker(broker)
        await bus.attach(thread.id, new=True)
        for n in (1, 2, 3):
            bus.publish(thread.id, "mine", {"n": n}, defer=True)  # left unwritten: seqs 1, 2, 3
        theirs = [Event(thread_id=thread.id, seq=seq, type="theirs", at=1.0) for seq in (1, 2)]
        await storage.append_events(theirs)  # another process ran the thread meanwhile
        await bus.attach(thread.id, stored=2)  # the next execution here, under its lease
        await storage.commit(StepWrite(thread_id=thread.id, events=bus.take_pending(thread.id)))
        bus.publish(thread.id, "next", {}, defer=True)
        await storage.commit(StepWrite(thread_id=thread.id, events=bus.take_pending(thread.id)))
        if broker is not None:
            await bus.flush(thread.id)
        return [(e.seq, e.type) for e in await storage.events_after(thread.id, 0)]


async def test_closing_writes_every_threads_events_it_can_and_does_not_raise_on_the_rest(tmp_path: Path) -> None:
    """Before, the first thread whose pending events could not be written (their seqs taken in the log)
    raised out of `close()`: the threads after it were not flushed, and a runtime closing stopped
    before it closed its storage."""
    from orchestrator.core.messages import Event

    async with SQLiteStorage(str(tmp_path / "bus.db")) as storage:
        bus = EventBus(storage, SecretScopes([]))
        threads = [await storage.create_thread(ThreadRecord(agent_id="x")) for _ in range(2)]
        for thread in threads:
            await bus.attach(thread.id, new=True)
            bus.publish(thread.id, "mine", {}, defer=True)
        await storage.append_events([Event(thread_id=threads[0].id, seq=1, type="theirs", at=1.0)])
        await bus.close()
        assert [e.type for e in await storage.events_after(threads[0].id, 0)] == ["theirs"]
        assert [e.type for e in await storage.events_after(threads[1].id, 0)] == ["mine"]


def _followed() -> int:
    """What a full collection walks: the references from every tracked object."""
    return sum(len(gc.get_referents(o)) for o in gc.get_objects())


async def _bus_on_a_thread(storage: SQLiteStorage) -> tuple[EventBus, ThreadRecord, tuple[int, int]]:
    """A bus attached to a new thread, and the tracked objects and references counted once it is."""
    thread = await storage.create_thread(ThreadRecord(agent_id="x"))
    bus = EventBus(storage, SecretScopes([]))
    await bus.attach(thread.id, new=True)
    gc.collect()
    return bus, thread, (len(gc.get_objects()), _followed())


async def test_live_deltas_held_for_reconnecting_cost_the_collector_nothing(tmp_path: Path) -> None:
    """At 1,000 conversations in flight the rings of deltas were 40% of what every full
    collection walked (three tracked objects per delta), then still a reference per delta; a
    reconnecting reader still gets each delta back whole, in order, and mutating one it got
    changes nothing kept."""
    async with SQLiteStorage(str(tmp_path / "ring.db")) as storage:
        bus, thread, (objects, references) = await _bus_on_a_thread(storage)
        for i in range(1000):
            bus.publish(thread.id, "text_delta", {"side": "a", "depth": 0, "text": f"part {i} "})
        gc.collect(0)  # one young collection: entries the load's own young collections have not seen yet
        assert len(gc.get_objects()) - objects < 100  # none waits for a full collection to be untracked
        assert _followed() - references < 200  # and nothing holds a reference per delta

        bus.publish(thread.id, "noted", {"call": {"id": "c1"}, "parts": [1, 2]})  # nested: kept as given
        reader = bus.subscribe(thread.id, after=990)
        got = [await anext(reader) for _ in range(11)]
        await reader.aclose()
        assert [e.seq for e in got] == list(range(991, 1002))
        assert got[0].data == {"side": "a", "depth": 0, "text": "part 990 "} and got[0].thread_id == thread.id
        assert got[-1].type == "noted" and got[-1].data == {"call": {"id": "c1"}, "parts": [1, 2]}
        got[0].data["text"] = "changed"
        again = bus.subscribe(thread.id, after=990)
        assert (await anext(again)).data["text"] == "part 990 "
        await again.aclose()


async def test_a_delta_nobody_hears_yet_is_still_there_for_who_comes_and_one_heard_is_heard_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`publish_delta` skips the `Event` model while no one listens (the bus's commonest event):
    the ring still hands the delta, redacted, to a later subscriber, and a live subscriber gets each
    one as it is published, in order with the events around it."""
    from orchestrator.storage import events as events_module

    built: list[str] = []
    real = events_module.Event.model_construct

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(kwargs.get("type", "?"))
        return real(*args, **kwargs)

    async with SQLiteStorage(str(tmp_path / "delta.db")) as storage:
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        scopes = SecretScopes([])
        scopes.add("sk-secret-123", thread.id)
        bus = EventBus(storage, scopes)
        await bus.attach(thread.id, new=True)
        monkeypatch.setattr(events_module.Event, "model_construct", counting)

        bus.publish_delta(thread.id, "text_delta", {"side": "a", "depth": 0, "text": "key sk-secret-123 "})
        bus.publish_delta(thread.id, "text_delta", {"side": "a", "depth": 0, "text": "more"})
        assert built == []  # nobody listening: no model built

        late = bus.subscribe(thread.id, after=0)
        got = [await anext(late) for _ in range(2)]
        assert [e.seq for e in got] == [1, 2] and "sk-secret-123" not in got[0].data["text"]

        bus.publish(thread.id, "noted", {"n": 1}, defer=True)
        bus.publish_delta(thread.id, "text_delta", {"side": "a", "depth": 0, "text": "heard"})
        live = [await anext(late) for _ in range(2)]
        await late.aclose()
        assert [(e.seq, e.type) for e in live] == [(3, "noted"), (4, "text_delta")] and live[1].data["text"] == "heard"


async def test_the_ring_keeps_the_last_2048_live_events_in_order(tmp_path: Path) -> None:
    """Bounded whatever the answer's length; a reader coming back gets the newest 2048, in order,
    with payloads as JSON gives them (as from the log)."""
    async with SQLiteStorage(str(tmp_path / "bound.db")) as storage:
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        bus = EventBus(storage, SecretScopes([]))
        await bus.attach(thread.id, new=True)
        for i in range(5000):
            bus.publish(thread.id, "text_delta", {"side": "a", "depth": 0, "text": f'é{i}\n"q"'})
        reader = bus.subscribe(thread.id, after=0)
        got = [await anext(reader) for _ in range(2048)]
        await reader.aclose()
        assert [e.seq for e in got] == list(range(2953, 5001))
        assert got[-1].data == {"side": "a", "depth": 0, "text": 'é4999\n"q"'}


async def test_events_waiting_for_their_commit_hold_no_fields_set_of_their_own(tmp_path: Path) -> None:
    """Every field of a bus-built event is given, so one shared fields set stands for a set per event
    (at 1,000 conversations, most waiting on a commit, those sets were 2% of a full collection's work);
    what pydantic reports of the event is unchanged."""
    async with SQLiteStorage(str(tmp_path / "fields.db")) as storage:
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        bus = EventBus(storage, SecretScopes([]))
        await bus.attach(thread.id, new=True)
        gc.collect()
        before = sum(type(o) is set for o in gc.get_objects())
        events = [bus.publish(thread.id, "noted", {"n": i}, defer=True) for i in range(200)]
        assert sum(type(o) is set for o in gc.get_objects()) - before < 20
        assert events[0].model_fields_set == {"thread_id", "seq", "type", "data", "at"}
        assert events[0].model_dump(exclude_unset=True) == events[0].model_dump()
        events[0].type = "renamed"  # assignment keeps working, and marks nothing new
        assert events[1].model_fields_set == {"thread_id", "seq", "type", "data", "at"}


async def test_durable_events_waiting_for_their_commit_cost_the_collector_nothing(tmp_path: Path) -> None:
    """Durable events wait in the bus for the step that writes them, mostly while a model answers. Before,
    each waited as an `Event` and its payload (a `message_created` carries a whole message): some seven
    tracked objects and fifteen references for every full collection to walk, per event. Now they wait
    as JSON: a reference each. A subscriber and the commit still get each one back whole."""
    async with SQLiteStorage(str(tmp_path / "pending.db")) as storage:
        bus, thread, (objects, references) = await _bus_on_a_thread(storage)
        for i in range(500):
            call = {"id": f"c{i}", "name": "note", "arguments": {"q": str(i), "tags": ["a", "é"]}}
            bus.publish(thread.id, "noted", {"id": f"m{i}", "tool_calls": [call], "metadata": {}}, defer=True)
        gc.collect(0)
        assert len(gc.get_objects()) - objects < 100
        assert _followed() - references < 2 * 500

        reader = bus.subscribe(thread.id, after=498)  # not stored yet: a subscriber gets them from the bus
        got = [await anext(reader) for _ in range(2)]
        await reader.aclose()
        assert [e.seq for e in got] == [499, 500]
        assert got[1].data["tool_calls"][0]["arguments"] == {"q": "499", "tags": ["a", "é"]}
        await bus.flush(thread.id)
        stored = await storage.events_after(thread.id, 0)
        assert [e.seq for e in stored] == list(range(1, 501))
        assert stored[-1].model_dump() == got[-1].model_dump()


async def test_a_tool_emitting_data_the_log_cannot_hold_gets_an_error_and_the_thread_goes_on(
    make_runtime: Any,
) -> None:
    """Before: the payload was taken, then failed the next commit, every step's after it (the events were
    handed back each time), and the execution ended on that error. Now `emit` refuses it at once."""

    async def emits(state: Any, args: Q) -> dict:
        state.emit("progress_note", {"when": object()})
        return {"status": "success", "result": "unreachable"}

    defs = definitions(
        tools={"emits": define_tool(description="e", args=Q, execute=emits)},
        prompts={"pa": define_prompt(prompt="side a", tool_description="a", tools=("emits",))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa", max_steps=5))},
    )
    rt, _ = await make_runtime(defs, [R(tool_calls=[C("emits", {"q": "x"})]), R(text="done")])
    thread = await rt.create_thread("chat")
    result = await thread.send("go")
    assert result.output == "done"
    [tool] = [m for m in result.new_messages if m.role == "tool"]
    assert "emit: event 'progress_note': its data cannot be stored as JSON" in (tool.content or "")
    assert "progress_note" not in [e.type for e in await rt.storage.events_after(thread.id, 0)]


async def test_a_payload_the_log_cannot_hold_is_refused_at_publish_and_takes_no_number(tmp_path: Path) -> None:
    async with SQLiteStorage(str(tmp_path / "refused.db")) as storage:
        bus, thread, _ = await _bus_on_a_thread(storage)
        with pytest.raises(ValueError, match="event 'noted': its data cannot be stored as JSON"):
            bus.publish(thread.id, "noted", {"when": object()})
        assert bus.publish(thread.id, "noted", {"n": 1}).seq == 1
        await bus.flush(thread.id)
        assert [(e.seq, e.data) for e in await storage.events_after(thread.id, 0)] == [(1, {"n": 1})]
