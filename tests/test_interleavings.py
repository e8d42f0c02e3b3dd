"""Random schedules of sends, stops and racing starts on threads shared by two runtimes (two
processes sharing one storage, SQLite or PostgreSQL, no broker), and a runtime closed under running executions
then reopened. Whatever the schedule, the stored thread stays consistent: nothing left running,
messages numbered 1..n, the event log and every watcher's events in increasing order, each request
a history providers accept. The schedules are seeded; the invariants do not depend on the timing.

This found the event numbering of a process that had created a thread going stale once another
process ran it (tests/test_event_durability.py has the direct case)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from storage_backends import StorageFactory, fake_clock, storage_factory  # noqa: F401 - fixtures
from support import Q, definitions

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.storage import ThreadBusyError
from providers.scripted import ScriptedCall, ScriptedResponse


async def _noted(state: Any, args: Q) -> dict:
    await _spin(int(args.q) % 4)  # calls of one step finish in another order than they started
    return {"status": "success", "result": f"noted {args.q}"}


def _defs() -> Any:
    prompts = {"pa": define_prompt(prompt="side a", tool_description="a", tools=("note",))}
    agents = {
        "chat": define_agent(type="ai_human", side_a=Side("pa", max_steps=4)),
        "duo": define_agent(
            type="dual_ai", side_a=Side("pa", max_steps=3), side_b=Side("pa", max_steps=2), max_session_turns=4
        ),
    }
    tools = {"note": define_tool(description="n", args=Q, execute=_noted)}
    return definitions(tools=tools, prompts=prompts, agents=agents)


def _model(seed: int) -> Any:
    """Answers with text or one to three tool calls, at random."""
    rnd = random.Random(seed)

    def answer(body: dict[str, Any]) -> ScriptedResponse:
        after_tools = body["messages"][-1]["role"] == "tool"
        if rnd.random() < (0.3 if after_tools else 0.5):
            return ScriptedResponse(tool_calls=[ScriptedCall("note", {"q": str(i)}) for i in range(rnd.randint(1, 3))])
        return ScriptedResponse(text="ok " * rnd.randint(1, 4))

    return answer


async def _spin(turns: int) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def _schedule(runtimes: list[Any], thread_id: str, rnd: random.Random) -> None:
    """Eight operations on one thread, each from either runtime: a send, a send stopped after a few
    loop turns, or two sends at once (one of which may be refused as busy)."""
    for _ in range(8):
        handles = [await rt.get_thread(thread_id) for rt in runtimes]
        handle = rnd.choice(handles)
        op = rnd.choice(["send", "stop", "race"])
        if op == "race":
            first = asyncio.ensure_future(handles[0].send("one"))
            await _spin(rnd.randint(0, 10))
            outcomes = await asyncio.gather(first, handles[1].send("two"), return_exceptions=True)
        else:
            task = asyncio.ensure_future(handle.send("hello"))
            if op == "stop":
                await _spin(rnd.randint(0, 60))
                handle.stop()
            outcomes = await asyncio.gather(task, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, ThreadBusyError):
                raise outcome


async def _check_thread(runtime: Any, thread_id: str) -> None:
    handle = await runtime.get_thread(thread_id)
    assert (await handle.refresh()).status != "running"
    messages = (await handle.get_messages()).messages
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1))
    seqs = [e.seq for e in await runtime.storage.events_after(thread_id, 0)]
    assert seqs == sorted(set(seqs))


def _check_requests(requests: list[dict[str, Any]]) -> None:
    """Each assistant message with tool calls is followed at once by one answer per call."""
    for body in requests:
        messages = body["messages"]
        for i, message in enumerate(messages):
            if message.get("tool_calls"):
                ids = [call["id"] for call in message["tool_calls"]]
                assert [m.get("tool_call_id") for m in messages[i + 1 : i + 1 + len(ids)]] == ids


@pytest.mark.parametrize("seed", range(6))
async def test_two_runtimes_sharing_a_storage_keep_every_thread_consistent(
    make_runtime: Any, storage_factory: StorageFactory, seed: int
) -> None:
    """On SQLite (one file) and PostgreSQL (one schema)."""
    first, model = await make_runtime(_defs(), _model(seed), storage=storage_factory.make())
    second, _ = await make_runtime(_defs(), _model(seed), storage=storage_factory.make())  # `model` answers both
    threads = [await first.create_thread("chat") for _ in range(6)]
    seen: dict[tuple[int, str], list[int]] = {}

    async def watch(index: int, runtime: Any, thread_id: str) -> None:
        async for event in (await runtime.get_thread(thread_id)).events():
            seen.setdefault((index, thread_id), []).append(event.seq)

    watchers = [asyncio.ensure_future(watch(i, rt, t.id)) for i, rt in enumerate([first, second]) for t in threads[::2]]
    await asyncio.gather(
        *(_schedule([first, second], t.id, random.Random(seed * 100 + i)) for i, t in enumerate(threads))
    )
    for thread in threads:
        await _check_thread(first, thread.id)
    _check_requests(model.requests)
    for watcher in watchers:
        watcher.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    assert seen and all(seqs == sorted(set(seqs)) for seqs in seen.values())


@pytest.mark.parametrize("seed", range(6))
async def test_a_runtime_closed_under_running_executions_leaves_threads_the_next_one_runs(
    make_runtime: Any, tmp_path: Any, seed: int
) -> None:
    rnd = random.Random(seed)
    db = str(tmp_path / "reopen.db")
    first, _ = await make_runtime(_defs(), _model(seed), db=db)
    threads = [await first.create_thread(rnd.choice(["chat", "duo"])) for _ in range(8)]
    running = [asyncio.ensure_future(t.send("hi") if t.record.agent_id == "chat" else t.run()) for t in threads]
    await _spin(rnd.randint(0, 200))
    await first.close(timeout=rnd.choice([0.0, 5.0]))
    await asyncio.gather(*running, return_exceptions=True)
    second, model = await make_runtime(_defs(), _model(seed), db=db)
    for thread in threads:
        handle = await second.get_thread(thread.id)
        result = await (handle.send("again") if thread.record.agent_id == "chat" else handle.run())
        assert result.reason in ("rest", "max_session_turns")
        await _check_thread(second, thread.id)
    _check_requests(model.requests)
