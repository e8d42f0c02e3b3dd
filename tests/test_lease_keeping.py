"""The lease heartbeat: a failed renewal is retried; a lost lease aborts the
execution at once (no further model request, running tools cancelled, nothing
more written), and the thread stays `running` for whoever takes it next."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support import Q, definitions

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.storage import StorageError
from orchestrator.storage.base import StaleLeaseError
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall


def _defs(tool: Any) -> Any:
    prompts = {"pa": define_prompt(prompt="side a", tool_description="a", tools=("work",))}
    agents = {"chat": define_agent(type="ai_human", side_a=Side("pa"))}
    return definitions(
        tools={"work": define_tool(description="w", args=Q, execute=tool)}, prompts=prompts, agents=agents
    )


class _Clock:
    """The heartbeat's clock: an interval (ttl/3) lasts until the test ticks; a retry's wait
    between failed renewals passes at once."""

    def __init__(self) -> None:
        self.interval = 0.0  # the runtime's lease_ttl / 3, set once the runtime exists
        self._ticks: asyncio.Queue[None] = asyncio.Queue()

    async def sleep(self, seconds: float) -> None:
        if seconds >= self.interval:
            await self._ticks.get()
        else:
            await asyncio.sleep(0)

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self._ticks.put_nowait(None)


class _Renewals:
    """Stands in for storage.renew_lease: fails as told, else renews for real."""

    def __init__(self, storage: Any, failures: list[BaseException | None]) -> None:
        self._renew = storage.renew_lease
        self.failures = failures
        self.calls = 0
        self.succeeded = asyncio.Event()

    async def __call__(self, lease: Any, ttl: float) -> Any:
        self.calls += 1
        failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            raise failure
        renewed = await self._renew(lease, ttl)
        self.succeeded.set()
        return renewed


async def test_failed_renewals_are_retried_and_the_execution_goes_on(make_runtime: Any) -> None:
    clock = _Clock()
    renewals: list[_Renewals] = []

    async def work(state: Any, args: Q) -> dict:
        clock.tick()  # one interval: a renewal, retried after each failure
        await renewals[0].succeeded.wait()
        return {"status": "success", "result": "worked"}

    rt, model = await make_runtime(_defs(work), [R(tool_calls=[C("work", {})]), R(text="done")])
    rt.services.heartbeat.sleep = clock.sleep
    clock.interval = rt.settings.lease_ttl / 3
    renewals.append(_Renewals(rt.storage, [StorageError("database is locked"), OSError("connection reset")]))
    rt.storage.renew_lease = renewals[0]  # type: ignore[method-assign]
    thread = await rt.create_thread("chat")
    result = await asyncio.wait_for(thread.send("go"), 30)
    assert result.output == "done" and len(model.requests) == 2
    assert renewals[0].calls == 3  # two failures, then a renewal that held


@pytest.mark.parametrize(
    "failures",
    [[StaleLeaseError("taken over")], [StorageError("database is gone")] * 100],
    ids=["refused", "keeps-failing"],
)
async def test_lost_lease_aborts_the_execution_at_once(make_runtime: Any, failures: list[BaseException]) -> None:
    clock = _Clock()
    cancelled = asyncio.Event()

    async def work(state: Any, args: Q) -> dict:
        clock.tick()  # one interval: a renewal, and its retries
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    rt, model = await make_runtime(_defs(work), [R(tool_calls=[C("work", {})]), R(text="never")])
    rt.services.heartbeat.sleep = clock.sleep
    clock.interval = rt.settings.lease_ttl / 3
    renewals = _Renewals(rt.storage, list(failures))
    rt.storage.renew_lease = renewals  # type: ignore[method-assign]
    thread = await rt.create_thread("chat")
    with pytest.raises(StaleLeaseError, match="lease lost"):
        await asyncio.wait_for(thread.send("go"), 30)
    assert cancelled.is_set() and len(model.requests) == 1
    assert renewals.calls == (1 if len(failures) == 1 else 4)  # refused: no retry; failing: retried, then given up
    record = await rt.storage.get_thread(thread.id)
    assert record.status == "running"  # not settled by the lost execution: the next owner resumes it
    assert not any(e.type == "execution_stopped" for e in await rt.storage.events_after(thread.id, 0))


async def test_one_heartbeat_renews_every_lease_the_process_holds(tmp_path: Any) -> None:
    """A task sleeping per execution was about 50 references per conversation in every full
    collection at 1,000 conversations: one task renews them all, only what is still kept, and is
    gone when nothing is."""
    from orchestrator.core.messages import ThreadRecord
    from orchestrator.storage.lease import Heartbeat
    from orchestrator.storage.sqlite import SQLiteStorage

    def beats() -> int:
        return sum(t.get_name() == "lease-heartbeat" and not t.done() for t in asyncio.all_tasks())

    clock = _Clock()
    clock.interval = 10.0
    async with SQLiteStorage(str(tmp_path / "leases.db")) as storage:
        heartbeat = Heartbeat(storage, sleep=clock.sleep)
        leases = []
        for _ in range(3):
            thread = await storage.create_thread(ThreadRecord(agent_id="x"))
            leases.append(await storage.acquire_lease(thread.id, "me", 30))
        renewals = _Renewals(storage, [])
        storage.renew_lease = renewals  # type: ignore[method-assign]
        keepers = [heartbeat.keep(lease, 30) for lease in leases]
        assert beats() == 1
        await heartbeat.release(keepers[2])
        clock.tick()

        async def renewed() -> None:  # the renewals go through the storage thread
            while any(k.lease is lease for k, lease in zip(keepers[:2], leases, strict=False)):
                renewals.succeeded.clear()
                await renewals.succeeded.wait()

        await asyncio.wait_for(renewed(), 5)
        assert [k.lease.expires_at > lease.expires_at for k, lease in zip(keepers, leases, strict=True)] == [
            True,
            True,
            False,  # released before the beat: not renewed
        ]
        for keeper in keepers[:2]:
            await heartbeat.release(keeper)
        await asyncio.sleep(0)
        assert beats() == 0


def test_a_runtime_used_from_a_new_event_loop_renews_only_what_that_loop_keeps(tmp_path: Any) -> None:
    """An execution whose loop closed under it never released its lease: the next loop must not
    renew that lease for ever (the thread would stay locked), and must renew its own."""
    from orchestrator.core.messages import ThreadRecord
    from orchestrator.storage.lease import Heartbeat
    from orchestrator.storage.sqlite import SQLiteStorage

    storage = SQLiteStorage(str(tmp_path / "loops.db"))
    first = _Clock()
    first.interval = 10.0
    heartbeat = Heartbeat(storage, sleep=first.sleep)

    async def keep_one() -> Any:
        await storage.open()
        thread = await storage.create_thread(ThreadRecord(agent_id="x"))
        return heartbeat.keep(await storage.acquire_lease(thread.id, "me", 30), 30)

    abandoned = asyncio.run(keep_one())  # its loop ends with the lease kept
    renewals: list[str] = []

    async def second_loop() -> None:
        kept = await keep_one()
        renew = storage.renew_lease

        async def counting(lease: Any, ttl: float) -> Any:
            renewals.append(lease.thread_id)
            return await renew(lease, ttl)

        storage.renew_lease = counting  # type: ignore[method-assign]
        clock = _Clock()  # a queue of this loop's
        clock.interval = 10.0
        heartbeat.sleep = clock.sleep
        clock.tick()
        for _ in range(100):
            if renewals:
                break
            await asyncio.sleep(0)
        await heartbeat.release(kept)
        assert renewals == [kept.lease.thread_id]
        await storage.close()

    asyncio.run(second_loop())
    assert abandoned.lease.thread_id not in renewals


async def test_an_ending_execution_leaves_the_fence_of_the_one_that_took_the_thread_over(make_runtime: Any) -> None:
    """An execution whose lease expired may end after another one in this process has taken the thread
    (with PostgreSQL, that one's `begin_execution` can return first). Before: the old one's `finally`
    dropped the thread's fence whatever its token and detached the channel, so the new execution's
    events were written unfenced, or its next publish found no channel."""
    newer: list[int] = []
    runtimes: list[Any] = []

    async def took_over(state: Any, args: Q) -> dict:
        newer.append(state.execution.lease_token + 1)  # a second execution here took the expired lease
        runtimes[0].services.bus.fence(state.thread_id, newer[0])
        return {"status": "success", "result": "worked"}

    rt, _ = await make_runtime(_defs(took_over), [R(tool_calls=[C("work", {})]), R(text="done")])
    runtimes.append(rt)
    thread = await rt.create_thread("chat")

    await thread.send("go")

    bus = rt.services.bus
    event = bus.publish(thread.id, "note", {"by": "the execution that took over"})  # its channel is still there
    assert event.thread_id == thread.id
    bus.unfence(thread.id, newer[0])  # the newer one ends in turn


@pytest.mark.parametrize("emits", [True, False], ids=["stale-emit", "stale-commit"])
async def test_a_stale_execution_neither_writes_into_nor_takes_from_the_log_of_the_one_that_took_over(
    make_runtime: Any, tmp_path: Any, emits: bool
) -> None:
    """Two executions of one thread in one process share the thread's event channel: the first one's
    lease expired (its heartbeat never ran) and the second took the thread over, resuming the first
    one's tool call. Before: the stale execution's `emit` was numbered and written under the new
    owner's lease, and its step's commit took the new owner's pending events with it and, refused
    as stale, dropped them, so the new owner's tool result was missing from the log."""
    from orchestrator import define_hook
    from orchestrator.engine.executor import execute
    from orchestrator.storage.sqlite import SQLiteStorage

    now = [1_000.0]
    tokens: list[int] = []
    new_owner: list[asyncio.Task[Any]] = []
    holding, released = asyncio.Event(), asyncio.Event()

    async def work(state: Any, args: Q) -> dict:
        if tokens:  # the new owner resumes the call
            return {"status": "success", "result": "the new owner's work"}
        tokens.append(state.execution.lease_token)
        now[0] += rt.settings.lease_ttl + 1  # the lease expires: nothing renewed it
        new_owner.append(asyncio.create_task(execute(rt.services, await rt.storage.get_thread(state.thread_id))))
        await holding.wait()  # the new owner's tool result is stored, its event waiting for the next commit
        if emits:
            state.emit("note", {"by": "the stale execution"})
            for _ in range(5):
                await asyncio.sleep(0)  # the bus's background write would take the note now
        return {"status": "success", "result": "the stale execution's work"}

    async def hold(state: Any, message: Any) -> None:
        if message.role == "tool" and state.execution.lease_token != tokens[0]:
            holding.set()
            await released.wait()

    defs = _defs(work)
    defs.hooks["after_create_message"] = define_hook("after_create_message", hold).named("after_create_message")
    storage = SQLiteStorage(str(tmp_path / "takeover.db"), clock=lambda: now[0])
    rt, _ = await make_runtime(defs, [R(tool_calls=[C("work", {})]), R(text="done by the new owner")], storage=storage)
    never = _Clock()
    never.interval = 0.0  # every heartbeat sleep waits for a tick that never comes
    rt.services.heartbeat.sleep = never.sleep
    thread = await rt.create_thread("chat")

    with pytest.raises(StaleLeaseError):
        await asyncio.wait_for(thread.send("go"), 30)
    released.set()
    executed = await asyncio.wait_for(new_owner[0], 30)

    assert executed.result.output == "done by the new owner"
    log = await rt.storage.events_after(thread.id, 0)
    assert not [e for e in log if e.type == "note"]
    results = [e.data["content"] for e in log if e.type == "tool_result"]
    assert results == ["the new owner's work"]


class _RenewingStorage:
    """Only what the heartbeat calls: every renewal succeeds."""

    def __init__(self) -> None:
        self.renewed = 0

    async def renew_lease(self, lease: Any, ttl: float) -> Any:
        self.renewed += 1
        return lease


async def test_renewals_that_succeed_leave_no_garbage_for_the_collector() -> None:
    """A tenacity loop per renewal left ~40 objects in reference cycles; a conversation outliving two young
    collections carried them into the old generation, where only a full collection finds them."""
    import gc

    from orchestrator.storage.base import Lease
    from orchestrator.storage.lease import Heartbeat

    clock, storage = _Clock(), _RenewingStorage()
    clock.interval = 10.0
    heartbeat = Heartbeat(storage, sleep=clock.sleep)  # type: ignore[arg-type]
    keeper = heartbeat.keep(Lease("t1", "me", 1, 0.0), ttl=30.0)
    gc.collect()
    gc.disable()
    try:
        for renewals in range(1, 21):
            clock.tick()
            while storage.renewed < renewals:
                await asyncio.sleep(0)
            for _ in range(3):  # the renewal's task ends
                await asyncio.sleep(0)
        found = gc.collect()
    finally:
        gc.enable()
        await heartbeat.release(keeper)
    assert storage.renewed == 20
    assert found < 20, f"{found} objects of cyclic garbage after 20 renewals"
