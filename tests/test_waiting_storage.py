"""The waiting_calls table on SQLite and PostgreSQL (storage/waiting_store.py): a decision is one conditional
write, so of two deciders racing (two clients of one database) exactly one decides; a record requested again
after a crash keeps the first; the overdue query sees only open calls whose expiry passed."""

from __future__ import annotations

import asyncio

from storage_backends import StorageFactory, fake_clock, new_thread, storage, storage_factory  # noqa: F401

from orchestrator.core.results import ToolResult
from orchestrator.core.waiting import Decision, WaitingCall
from orchestrator.storage.base import Storage


def _call(thread_id: str, call_id: str = "call_1", position: int = 0, **fields: object) -> WaitingCall:
    data: dict[str, object] = {
        "thread_id": thread_id,
        "call_id": call_id,
        "position": position,
        "kind": "approval",
        "tool": "refund",
        "arguments": {"order_id": "A1", "amount": 150.5},
        "side": "a",
        "requested_at": 100.0,
        **fields,
    }
    return WaitingCall.model_validate(data)


async def test_round_trip_and_a_request_again_keeps_the_first(storage: Storage) -> None:
    thread = await new_thread(storage)
    asked = _call(thread.id, kind="answer", payload={"question": "sure?", "n": [1, 2]}, expires_at=160.0)
    await storage.add_waiting_calls([asked])
    await storage.add_waiting_calls([_call(thread.id, kind="answer", payload="other")])  # same call and position
    [stored] = await storage.waiting_calls(thread.id)
    assert stored == asked
    await storage.add_waiting_calls([_call(thread.id, position=1, kind="result")])
    assert [c.position for c in await storage.waiting_calls(thread.id, call_id="call_1")] == [0, 1]
    assert await storage.waiting_calls(thread.id, call_id="call_2") == []


async def test_a_decision_is_written_once(storage: Storage) -> None:
    thread = await new_thread(storage)
    await storage.add_waiting_calls([_call(thread.id, kind="result")])
    result = Decision(kind="result", result=ToolResult.ok("tracking 42"))
    assert await storage.decide_waiting_call(thread.id, "call_1", 0, result, 200.0) is True
    assert await storage.decide_waiting_call(thread.id, "call_1", 0, Decision(kind="stopped"), 201.0) is False
    assert await storage.decide_waiting_call(thread.id, "call_nope", 0, result, 201.0) is False
    [stored] = await storage.waiting_calls(thread.id)
    assert stored.decision == result and stored.decided_at == 200.0 and not stored.open
    assert await storage.waiting_calls(thread.id, open_only=True) == []


async def test_two_clients_racing_decide_once(storage_factory: StorageFactory) -> None:
    first, second = storage_factory.make(), storage_factory.make()
    await first.open()
    await second.open()
    try:
        thread = await new_thread(first)
        await first.add_waiting_calls([_call(thread.id, f"call_{i}") for i in range(20)])
        approve, reject = Decision(kind="approved"), Decision(kind="rejected", reason="no")
        for i in range(20):
            won = await asyncio.gather(
                first.decide_waiting_call(thread.id, f"call_{i}", 0, approve, 1.0),
                second.decide_waiting_call(thread.id, f"call_{i}", 0, reject, 1.0),
            )
            assert sorted(won) == [False, True]
            [record] = await second.waiting_calls(thread.id, call_id=f"call_{i}")
            assert record.decision == (approve if won[0] else reject)
    finally:
        await first.close()
        await second.close()


async def test_overdue_calls_are_the_open_ones_past_their_expiry(storage: Storage) -> None:
    thread = await new_thread(storage)
    await storage.add_waiting_calls(
        [
            _call(thread.id, "due", expires_at=150.0),
            _call(thread.id, "later", expires_at=500.0),
            _call(thread.id, "never"),
            _call(thread.id, "decided", expires_at=120.0),
        ]
    )
    await storage.decide_waiting_call(thread.id, "decided", 0, Decision(kind="approved"), 130.0)
    assert [c.call_id for c in await storage.expired_waiting_calls(200.0)] == ["due"]
    assert [c.call_id for c in await storage.expired_waiting_calls(600.0)] == ["due", "later"]
