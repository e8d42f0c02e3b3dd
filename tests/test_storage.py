"""The storage contract, run against every backend (see storage_backends.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from storage_backends import (  # noqa: F401 - fixtures
    FakeClock,
    contents,
    ev,
    fake_clock,
    msg,
    new_thread,
    storage,
    storage_factory,
)

from orchestrator.core.messages import Event, ExecutionSnapshot, Message, ThreadRecord, ToolCall, Usage
from orchestrator.core.results import AttachmentRef
from orchestrator.storage import (
    DuplicateEventError,
    NotFoundError,
    StaleLeaseError,
    StepWrite,
    Storage,
    StorageError,
)

# -- threads -----------------------------------------------------------------


async def test_thread_round_trip_and_save(storage: Storage) -> None:
    thread = ThreadRecord(
        agent_id="support",
        user_id="u1",
        arguments={"order": {"id": 7, "tags": ["a", "b"]}, "ok": True},
        parent_id="thr_parent",
        depth=2,
    )
    assert await storage.create_thread(thread) == thread
    assert await storage.get_thread(thread.id) == thread

    thread.status = "running"
    thread.execution = ExecutionSnapshot(flow_id="f1", current_side="b", step_count=3, forced_side="a")
    thread.usage = Usage(input_tokens=10, output_tokens=5, cost=0.25, requests=2)
    thread.updated_at += 5
    await storage.save_thread(thread)
    assert await storage.get_thread(thread.id) == thread


async def test_unknown_thread_is_not_found_naming_the_id(storage: Storage) -> None:
    with pytest.raises(NotFoundError, match="thread.*thr_nope"):
        await storage.get_thread("thr_nope")
    with pytest.raises(NotFoundError, match="thr_nope"):
        await storage.save_thread(ThreadRecord(id="thr_nope", agent_id="a"))
    with pytest.raises(NotFoundError, match="thr_nope"):
        await storage.append_messages("thr_nope", [msg("thr_nope")])
    with pytest.raises(NotFoundError, match="thr_nope"):
        await storage.get_messages("thr_nope")
    with pytest.raises(NotFoundError, match="thr_nope"):
        await storage.set_value("thr_nope", "k", 1)
    with pytest.raises(NotFoundError, match="thr_nope"):
        await storage.events_after("thr_nope", 0)
    with pytest.raises(NotFoundError, match="thr_nope"):
        await storage.acquire_lease("thr_nope", "me", 10)


async def test_create_duplicate_thread_is_refused(storage: Storage) -> None:
    thread = await new_thread(storage)
    with pytest.raises(StorageError, match=thread.id):
        await storage.create_thread(thread)


async def test_a_thread_is_created_with_its_first_events_in_one_transaction(storage: Storage) -> None:
    thread = ThreadRecord(agent_id="support")
    created = ev(thread.id, 1, "thread_created", {"agent": "support"})
    assert await storage.create_thread(thread, [created]) == thread
    assert await storage.events_after(thread.id, 0) == [created]
    with pytest.raises(StorageError, match=thread.id):  # a duplicate id: neither the row nor its events change
        await storage.create_thread(thread.model_copy(update={"agent_id": "other"}), [ev(thread.id, 2)])
    assert (await storage.get_thread(thread.id)).agent_id == "support"
    assert await storage.events_after(thread.id, 0) == [created]


async def test_an_event_of_another_thread_is_refused_at_create_naming_it(storage: Storage) -> None:
    thread = ThreadRecord(agent_id="support")
    with pytest.raises(ValueError, match="create_thread events: event seq 1 has thread_id 'thr_other'"):
        await storage.create_thread(thread, [ev("thr_other", 1)])
    with pytest.raises(NotFoundError):
        await storage.get_thread(thread.id)


async def test_list_threads_filters_and_pages(storage: Storage) -> None:
    made = []
    for i, (user, status) in enumerate([("u1", "idle"), ("u2", "idle"), ("u1", "running"), ("u1", "idle")]):
        made.append(await new_thread(storage, user_id=user, status=status, created_at=100.0 + i))
    ids = [t.id for t in made]

    assert [t.id for t in await storage.list_threads()] == ids
    assert [t.id for t in await storage.list_threads(user_id="u1")] == [ids[0], ids[2], ids[3]]
    assert [t.id for t in await storage.list_threads(status="idle")] == [ids[0], ids[1], ids[3]]
    assert [t.id for t in await storage.list_threads(user_id="u1", status="idle")] == [ids[0], ids[3]]
    assert [t.id for t in await storage.list_threads(limit=2, offset=1)] == ids[1:3]
    assert await storage.list_threads(user_id="nobody") == []
    assert await storage.list_threads(offset=10) == []
    with pytest.raises(ValueError, match="limit"):
        await storage.list_threads(limit=-1)
    with pytest.raises(ValueError, match="offset"):
        await storage.list_threads(offset=-1)


async def test_saving_a_thread_moves_it_in_the_user_and_status_filters(storage: Storage) -> None:
    """The indexed columns (user, status, creation time) change with a save as the others do."""
    thread = await new_thread(storage, user_id="u1", status="idle", created_at=100.0)
    other = await new_thread(storage, user_id="u2", status="idle", created_at=101.0)
    thread.status, thread.user_id, thread.created_at = "running", "u2", 102.0
    await storage.save_thread(thread)
    assert [t.id for t in await storage.list_threads(status="running")] == [thread.id]
    assert [t.id for t in await storage.list_threads(user_id="u2")] == [other.id, thread.id]
    assert await storage.list_threads(user_id="u1") == []
    thread.status = "idle"
    thread.usage = Usage(input_tokens=1)
    await storage.save_thread(thread)
    assert await storage.get_thread(thread.id) == thread
    assert [t.id for t in await storage.list_threads(user_id="u2", status="idle")] == [other.id, thread.id]


# -- messages ----------------------------------------------------------------


async def test_append_assigns_strictly_increasing_seq(storage: Storage) -> None:
    thread = await new_thread(storage)
    other = await new_thread(storage)
    batch = [msg(thread.id, "a"), msg(thread.id, "b"), msg(thread.id, "c")]
    stored = await storage.append_messages(thread.id, batch)
    assert [m.seq for m in stored] == [1, 2, 3]
    assert [m.seq for m in batch] == [0, 0, 0]  # the caller's objects are left alone
    more = await storage.append_messages(thread.id, [msg(thread.id, "d"), msg(thread.id, "e")])
    assert [m.seq for m in more] == [4, 5]
    assert [m.seq for m in await storage.append_messages(other.id, [msg(other.id)])] == [1]
    assert await storage.append_messages(thread.id, []) == []
    page = await storage.get_messages(thread.id)
    assert [(m.seq, m.content) for m in page.messages] == list(enumerate("abcde", start=1))


async def test_append_refuses_a_message_of_another_thread(storage: Storage) -> None:
    thread = await new_thread(storage)
    with pytest.raises(ValueError, match="thread_id"):
        await storage.append_messages(thread.id, [msg("thr_other")])


async def test_every_message_field_round_trips(storage: Storage) -> None:
    thread = await new_thread(storage)
    message = Message(
        thread_id=thread.id,
        side="a",
        role="assistant",
        content='héllo \u2603 "quoted"',
        tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"id": 1}', provider_executed=True)],
        tool_call_id="c0",
        name="lookup",
        tool_status="error",
        attachments=[AttachmentRef(id="f1", name="a.png", mime_type="image/png", size=3, width=1, height=2)],
        provider_blocks=[{"type": "web_search", "z": 1, "a": [1, 2.5, None, {"k": "v"}]}],
        silent=True,
        depth=3,
        flow_id="flow_1",
        metadata={"nested": {"x": [1, 2]}, "flag": False},
        created_at=1234.5678,
        updated_at=2345.25,
    )
    [stored] = await storage.append_messages(thread.id, [message])
    assert await storage.get_message(thread.id, message.id) == stored
    assert stored == message.model_copy(update={"seq": 1})
    # provider blocks come back verbatim, key order included
    assert list(stored.provider_blocks[0]) == ["type", "z", "a"]  # type: ignore[index]


async def test_update_message_keeps_seq(storage: Storage) -> None:
    thread = await new_thread(storage)
    [first, second] = await storage.append_messages(thread.id, [msg(thread.id, "one"), msg(thread.id, "two")])
    edited = first.model_copy(update={"content": "ONE", "metadata": {"edited": True}, "silent": True})
    await storage.update_message(edited)
    assert await storage.get_message(thread.id, first.id) == edited
    assert (await storage.get_message(thread.id, second.id)).content == "two"
    with pytest.raises(NotFoundError, match="msg_missing"):
        await storage.update_message(msg(thread.id, id="msg_missing"))
    with pytest.raises(NotFoundError, match="msg_missing"):
        await storage.get_message(thread.id, "msg_missing")


# -- pagination ----------------------------------------------------------------

# seq:      1  2  3  4  5  6  7  8  9  10
_SILENT = {3, 7}
_DEPTH = {1: 0, 2: 0, 3: 0, 4: 1, 5: 2, 6: 0, 7: 1, 8: 0, 9: 2, 10: 0}


@pytest.fixture
async def paged(storage: Storage) -> str:
    thread = await new_thread(storage)
    await storage.append_messages(
        thread.id,
        [msg(thread.id, f"m{s}", silent=s in _SILENT, depth=_DEPTH[s]) for s in range(1, 11)],
    )
    return thread.id


def _expected(limit: int | None, offset: int, order: str, include_silent: bool, max_depth: int | None):
    seqs = [
        s
        for s in range(1, 11)
        if (include_silent or s not in _SILENT) and (max_depth is None or _DEPTH[s] <= max_depth)
    ]
    if order == "desc":
        seqs.reverse()
    page = seqs[offset:] if limit is None else seqs[offset : offset + limit]
    return page, len(seqs), offset + len(page) < len(seqs)


async def test_pagination_edges(storage: Storage, paged: str) -> None:
    async def seqs(**kw: object) -> tuple[list[int], int, bool]:
        r = await storage.get_messages(paged, **kw)  # type: ignore[arg-type]
        return [m.seq for m in r.messages], r.total, r.has_more

    visible = [1, 2, 4, 5, 6, 8, 9, 10]
    assert await seqs() == (visible, 8, False)
    assert await seqs(limit=3) == ([1, 2, 4], 8, True)
    assert await seqs(limit=3, offset=5) == ([8, 9, 10], 8, False)  # ends exactly at the last one
    assert await seqs(order="desc", limit=3) == ([10, 9, 8], 8, True)
    assert await seqs(offset=8) == ([], 8, False)
    assert await seqs(offset=50, limit=5) == ([], 8, False)  # past the end
    assert await seqs(limit=0) == ([], 8, True)
    assert await seqs(limit=0, offset=8) == ([], 8, False)
    assert await seqs(include_silent=True) == (list(range(1, 11)), 10, False)
    assert await seqs(max_depth=0) == ([1, 2, 6, 8, 10], 5, False)
    assert await seqs(max_depth=1, include_silent=True, order="desc", limit=2) == ([10, 8], 8, True)
    for name, kw in (("limit", {"limit": -1}), ("offset", {"offset": -1})):
        with pytest.raises(ValueError, match=name):
            await storage.get_messages(paged, **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="order"):
        await storage.get_messages(paged, order="sideways")  # type: ignore[arg-type]


async def test_pagination_matches_a_reference_model(storage: Storage, paged: str) -> None:
    """Every combination of the knobs, against a list-slicing reference."""
    combos = itertools.product(
        [None, 0, 1, 3, 8, 20], [0, 1, 7, 8, 9, 50], ["asc", "desc"], [False, True], [None, 0, 1]
    )
    for limit, offset, order, include_silent, max_depth in combos:
        r = await storage.get_messages(
            paged,
            limit=limit,
            offset=offset,
            order=order,
            include_silent=include_silent,
            max_depth=max_depth,  # type: ignore[arg-type]
        )
        got = ([m.seq for m in r.messages], r.total, r.has_more)
        assert got == _expected(limit, offset, order, include_silent, max_depth), (
            limit,
            offset,
            order,
            include_silent,
            max_depth,
        )


# -- values, env, files ----------------------------------------------------------


async def test_values_round_trip_json(storage: Storage) -> None:
    thread = await new_thread(storage)
    other = await new_thread(storage)
    samples = {
        "dict": {"a": [1, 2, {"b": None}], "c": "ü"},
        "list": [1, "two", 3.5, True, None],
        "str": "text",
        "int": 42,
        "float": 0.1,
        "bool": False,
        "big": 2**53 + 1,
    }
    for key, value in samples.items():
        await storage.set_value(thread.id, key, value)
    for key, value in samples.items():
        assert await storage.get_value(thread.id, key) == value
    assert await storage.get_value(thread.id, "missing") is None
    assert await storage.get_value(other.id, "dict") is None  # values are per thread
    await storage.set_value(thread.id, "int", {"now": "a dict"})
    assert await storage.get_value(thread.id, "int") == {"now": "a dict"}


async def test_env_scopes_and_types(storage: Storage) -> None:
    await storage.set_env("thread", "x1", "API_KEY", "sk-thread", "secret")
    await storage.set_env("thread", "x1", "GREETING", "hello", "text")
    await storage.set_env("user", "x1", "API_KEY", "sk-user", "text")  # same owner id, other scope

    thread_key = await storage.get_env("thread", "x1", "API_KEY")
    assert thread_key is not None and (thread_key.value, thread_key.type) == ("sk-thread", "secret")
    user_key = await storage.get_env("user", "x1", "API_KEY")
    assert user_key is not None and (user_key.value, user_key.type) == ("sk-user", "text")
    assert await storage.get_env("user", "x1", "GREETING") is None
    assert await storage.get_env("thread", "x2", "API_KEY") is None

    listed = await storage.list_env("thread", "x1")
    assert [(e.name, e.value, e.type) for e in listed] == [
        ("API_KEY", "sk-thread", "secret"),
        ("GREETING", "hello", "text"),
    ]
    assert await storage.list_env("user", "nobody") == []

    await storage.set_env("thread", "x1", "GREETING", "hi", "secret")  # overwrite value and type
    again = await storage.get_env("thread", "x1", "GREETING")
    assert again is not None and (again.value, again.type) == ("hi", "secret")
    with pytest.raises(ValueError, match="scope"):
        await storage.set_env("global", "x1", "A", "b", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="type"):
        await storage.set_env("user", "x1", "A", "b", "plain")  # type: ignore[arg-type]


async def test_files_round_trip(storage: Storage) -> None:
    thread = await new_thread(storage)
    data = bytes(range(256)) * 10
    ref = AttachmentRef(id="file_1", name="pic.png", mime_type="image/png", size=0, width=64, height=32)
    stored = await storage.put_file(thread.id, ref, data)
    assert stored == ref.model_copy(update={"size": len(data)})  # size is the stored byte count
    got_ref, got_data = await storage.get_file(thread.id, "file_1")
    assert (got_ref, got_data) == (stored, data)
    empty = await storage.put_file(
        thread.id, AttachmentRef(id="file_2", name="e.txt", mime_type="text/plain", size=9), b""
    )
    assert await storage.get_file(thread.id, "file_2") == (empty, b"")
    with pytest.raises(NotFoundError, match="file.*file_9"):
        await storage.get_file(thread.id, "file_9")


# -- events --------------------------------------------------------------------


async def test_event_log(storage: Storage) -> None:
    thread = await new_thread(storage)
    other = await new_thread(storage)
    assert await storage.last_event_seq(thread.id) == 0
    assert await storage.events_after(thread.id, 0) == []
    events = [ev(thread.id, 1, "a", {"x": [1, None]}), ev(thread.id, 2, "b", "text"), ev(thread.id, 3, "c", 7)]
    await storage.append_events(events)
    await storage.append_events([ev(other.id, 1)])
    assert await storage.events_after(thread.id, 0) == events
    assert await storage.events_after(thread.id, 1) == events[1:]
    assert await storage.events_after(thread.id, 0, limit=2) == events[:2]
    assert await storage.events_after(thread.id, 3) == []
    assert await storage.last_event_seq(thread.id) == 3
    assert await storage.last_event_seq(other.id) == 1


async def test_event_payloads_are_stored_as_their_json_form(storage: Storage) -> None:
    """What a tool or hook puts in an event: models, datetimes, non-ASCII text, a secret-free nested
    structure. Read back it is the JSON form `model_dump(mode="json")` gives, whichever encoder wrote it."""
    import datetime

    thread = await new_thread(storage)
    data = {
        "usage": Usage(requests=2, input_tokens=5),
        "when": datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC),
        "text": 'naïve café ☕ "quoted" \\ line\nbreak',
        "nested": [{"a": (1, 2)}, None, 1.5, True],
    }
    event = ev(thread.id, 1, "custom", data)
    await storage.append_events([event])
    [stored] = await storage.events_after(thread.id, 0)
    assert stored.data == event.model_dump(mode="json")["data"]
    assert stored.data["when"] == "2026-12-01T09:30:00Z" and stored.data["usage"]["input_tokens"] == 5


async def test_duplicate_event_seq_writes_none_of_the_batch(storage: Storage) -> None:
    thread = await new_thread(storage)
    await storage.append_events([ev(thread.id, 1)])
    with pytest.raises(StorageError, match=r"seq 1"):
        await storage.append_events([ev(thread.id, 2), ev(thread.id, 1, type="another")])
    assert [e.seq for e in await storage.events_after(thread.id, 0)] == [1]


async def test_an_event_written_again_as_it_is_stored_is_not_a_conflict(storage: Storage) -> None:
    """A commit whose answer was lost (PostgreSQL's connection dropped after COMMIT) hands its events
    back to the bus, and the next write carries them again. The same event at its seq is already
    stored, not a conflict: before, that next write failed whole, the execution with it."""
    thread = await new_thread(storage)
    stored = [ev(thread.id, 1, data={"a": [1, "x"]}), ev(thread.id, 2)]
    await storage.append_events(stored)
    await storage.commit(
        StepWrite(thread_id=thread.id, new_messages=[msg(thread.id, "on")], events=[*stored, ev(thread.id, 3)])
    )
    assert [(e.seq, e.type, e.data) for e in await storage.events_after(thread.id, 0)] == [
        (1, "step", {"a": [1, "x"]}),
        (2, "step", None),
        (3, "step", None),
    ]
    for changed in (
        ev(thread.id, 2, data={"b": 1}),
        ev(thread.id, 2, type="other"),
        Event(thread_id=thread.id, seq=2, type="step", at=9.0),
    ):
        with pytest.raises(DuplicateEventError, match="seq 2"):
            await storage.append_events([changed])


# -- commit ----------------------------------------------------------------------


async def test_commit_writes_the_whole_step(storage: Storage) -> None:
    thread = await new_thread(storage)
    [old] = await storage.append_messages(thread.id, [msg(thread.id, "question")])
    thread.status = "running"
    thread.usage = Usage(requests=1, input_tokens=3)
    new = await storage.commit(
        StepWrite(
            thread_id=thread.id,
            new_messages=[msg(thread.id, "answer", role="assistant"), msg(thread.id, "tool out", role="tool")],
            updated_messages=[old.model_copy(update={"metadata": {"seen": True}})],
            events=[ev(thread.id, 1), ev(thread.id, 2)],
            thread=thread,
        )
    )
    assert [(m.seq, m.content) for m in new] == [(2, "answer"), (3, "tool out")]
    assert await contents(storage, thread.id) == ["question", "answer", "tool out"]
    assert (await storage.get_message(thread.id, old.id)).metadata == {"seen": True}
    assert await storage.last_event_seq(thread.id) == 2
    assert await storage.get_thread(thread.id) == thread


async def test_commit_failing_midway_leaves_nothing(storage: Storage) -> None:
    thread = await new_thread(storage)
    [old] = await storage.append_messages(thread.id, [msg(thread.id, "question")])
    await storage.append_events([ev(thread.id, 1)])
    changed = thread.model_copy(update={"status": "failed"})
    bad_steps = [
        # a conflicting event at a stored seq fails after the messages were inserted
        StepWrite(
            thread.id,
            [msg(thread.id, "answer")],
            [old.model_copy(update={"content": "X"})],
            [ev(thread.id, 2), ev(thread.id, 1, type="another")],
            changed,
        ),
        # an unknown updated message fails after the new ones were inserted
        StepWrite(thread.id, [msg(thread.id, "answer")], [msg(thread.id, id="msg_gone")], [ev(thread.id, 2)], changed),
    ]
    for step in bad_steps:
        with pytest.raises(StorageError):
            await storage.commit(step)
        assert await contents(storage, thread.id) == ["question"]
        assert await storage.last_event_seq(thread.id) == 1
        assert (await storage.get_thread(thread.id)).status == "idle"
    # and the thread still takes the next good step with the next seq
    [answer] = await storage.commit(StepWrite(thread.id, new_messages=[msg(thread.id, "answer")]))
    assert answer.seq == 2


async def test_commit_with_a_stale_lease_token_writes_nothing(storage: Storage, fake_clock: FakeClock) -> None:
    thread = await new_thread(storage)
    first = await storage.acquire_lease(thread.id, "worker-1", ttl=10)
    await storage.commit(StepWrite(thread.id, [msg(thread.id, "by first")], lease_token=first.token))
    fake_clock.advance(11)
    second = await storage.acquire_lease(thread.id, "worker-2", ttl=10)
    assert second.token > first.token

    late = StepWrite(
        thread.id,
        [msg(thread.id, "late")],
        events=[ev(thread.id, 1)],
        thread=thread.model_copy(update={"status": "failed"}),
        lease_token=first.token,
    )
    with pytest.raises(StaleLeaseError, match=thread.id):
        await storage.commit(late)
    assert await contents(storage, thread.id) == ["by first"]
    assert await storage.last_event_seq(thread.id) == 0
    assert (await storage.get_thread(thread.id)).status == "idle"

    await storage.commit(StepWrite(thread.id, [msg(thread.id, "by second")], lease_token=second.token))
    await storage.release_lease(second)
    with pytest.raises(StaleLeaseError):  # a released lease fences too
        await storage.commit(StepWrite(thread.id, [msg(thread.id, "after release")], lease_token=second.token))
    with pytest.raises(StaleLeaseError):  # a token for a thread never leased
        other = await new_thread(storage)
        await storage.commit(StepWrite(other.id, [msg(other.id)], lease_token=1))
    assert await contents(storage, thread.id) == ["by first", "by second"]


# -- SQLite specifics ----------------------------------------------------------------


async def test_sqlite_file_is_in_wal_mode_and_memory_works(tmp_path: Path) -> None:
    import sqlite3

    from orchestrator.storage import open_storage

    path = tmp_path / "wal.db"
    async with open_storage(f"sqlite:///{path}") as s:
        await new_thread(s)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    async with open_storage("sqlite://:memory:") as mem:
        thread = await new_thread(mem)
        await mem.append_messages(thread.id, [msg(thread.id, "in memory")])
        assert await contents(mem, thread.id) == ["in memory"]


async def test_a_sqlite_step_that_keeps_the_status_writes_one_page_of_the_threads(tmp_path: Path) -> None:
    """A step's commit saves the thread (its execution snapshot, usage, time); the thread indexes
    (user and status, both with the creation time) stay out of the WAL unless their columns changed.
    Saved in one statement, SQLite rewrote both index pages at every step (three pages for one)."""
    import sqlite3

    from orchestrator.storage.sqlite import SQLiteStorage

    path = tmp_path / "pages.db"
    async with SQLiteStorage(str(path)) as s:
        thread = await new_thread(s, user_id="u1", status="running")
        page = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]

        async def pages_written(change: dict[str, object]) -> int:
            before = Path(f"{path}-wal").stat().st_size
            for field, value in change.items():
                setattr(thread, field, value)
            await s.save_thread(thread)
            return (Path(f"{path}-wal").stat().st_size - before) // (page + 24)  # a WAL frame: header + page

        assert await pages_written({"usage": Usage(input_tokens=5), "updated_at": thread.updated_at + 1}) == 1
        assert await pages_written({"status": "idle"}) == 3  # the row, and both indexes (status; user by time)
        assert await pages_written({"execution": ExecutionSnapshot(flow_id="f1", step_count=2)}) == 1


async def test_using_a_closed_storage_says_so(tmp_path: Path) -> None:
    from orchestrator.storage.sqlite import SQLiteStorage

    with pytest.raises(StorageError, match="not open"):
        await SQLiteStorage(str(tmp_path / "x.db")).get_thread("thr_1")


@pytest.mark.parametrize("part", ["new_messages", "updated_messages", "events", "thread"])
async def test_a_step_naming_another_thread_is_refused_whole_naming_the_part(storage: Storage, part: str) -> None:
    """A write fenced by one thread's lease must not change another thread: not its messages,
    its event log, nor its row (status, usage, execution)."""
    mine, other = await new_thread(storage), await new_thread(storage)
    [old] = await storage.append_messages(mine.id, [msg(mine.id, "question")])
    parts: dict[str, object] = {
        "new_messages": [msg(other.id, "theirs")],
        "updated_messages": [old.model_copy(update={"thread_id": other.id})],
        "events": [ev(other.id, 1)],
        "thread": other.model_copy(update={"status": "failed"}),
    }
    write = StepWrite(thread_id=mine.id, new_messages=[msg(mine.id, "answer")], events=[ev(mine.id, 1)])
    setattr(write, part, parts[part])
    with pytest.raises(ValueError, match=f"StepWrite.{part}.*expected '{mine.id}'"):
        await storage.commit(write)
    assert await contents(storage, mine.id) == ["question"]
    assert await contents(storage, other.id) == []
    assert await storage.last_event_seq(mine.id) == 0
    assert await storage.last_event_seq(other.id) == 0
    assert (await storage.get_thread(other.id)).status == "idle"
