"""Time travel: fork a thread at a message, or rewind it to one (docs/guide.md, "Time travel").

Storage copies or marks what a point holds (`storage/history.py`); this module decides what the
execution state was there: the counters of the execution the message belongs to, the session's
turns so far, and whose turn comes next. A fork or a rewound thread rests (`idle`) at that point; its
next execution starts the way any execution after a stopped one does (counters from zero, session
turns carried over), with the side whose turn it was taking the first turn (`ExecutionSnapshot.next_side`).

A point between a tool call and its result (inside a step) is refused with `HistoryPointError`,
which names the nearest valid points; it is never silently moved.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.core.messages import ExecutionSnapshot, SideName, ThreadRecord, new_id
from orchestrator.definitions.define import AgentDefinition
from orchestrator.storage.base import ThreadBusyError
from orchestrator.storage.history import Outline, check_point

if TYPE_CHECKING:
    from orchestrator.engine.live import LiveExecutions
    from orchestrator.engine.services import Services

__all__ = ["fork_thread", "rewind_thread", "snapshot_as_of"]


async def fork_thread(services: Services, source: ThreadRecord, at: int) -> ThreadRecord:
    """A new thread whose history is `source`'s up to and including message `at` (same agent, arguments
    and user); `source` is not touched. Its first events (`thread_created`, `thread_forked`) are stored
    with it."""
    agent = services.definitions.agents[source.agent_id]
    outline = await services.storage.message_outline(source.id)
    check_point(outline, at, source.id, "fork")  # before anything is numbered or written
    fork = ThreadRecord(
        agent_id=source.agent_id,
        user_id=source.user_id,
        arguments=dict(source.arguments),
        parent_id=source.parent_id,
        depth=source.depth,
        execution=snapshot_as_of(_upto(outline, at), agent, "forked", max_steps=services.settings.default_max_steps),
        forked_from=source.id,
        forked_at=at,
    )
    bus = services.bus
    await bus.attach(fork.id, new=True)
    publish = bus.publisher(fork.id, defer=True)
    publish("thread_created", {"agent": fork.agent_id, "user_id": fork.user_id})
    publish("thread_forked", {"forked_from": source.id, "forked_at": at})
    try:
        await services.storage.fork_thread(source.id, at, fork, bus.take_pending(fork.id))
    finally:
        bus.detach(fork.id)
    return fork


async def rewind_thread(services: Services, live: LiveExecutions, thread_id: str, to: int) -> tuple[ThreadRecord, int]:
    """`thread_id` continues from message `to`: what came after is kept, marked superseded. Refused
    (ThreadBusyError) while an execution runs, here or in another process (the thread's lease).
    Returns the thread as stored and how many messages were superseded."""
    storage = services.storage
    if live.running(thread_id):
        raise ThreadBusyError(f"rewind: thread {thread_id!r} has an execution running here; stop it first")
    owner = f"{services.owner}/rewind-{new_id('r')[-8:]}"
    try:
        lease = await storage.acquire_lease(thread_id, owner, services.settings.lease_ttl)
    except ThreadBusyError as exc:
        raise ThreadBusyError(
            f"rewind: thread {thread_id!r} has an execution running; stop it first", expires_in=exc.expires_in
        ) from None
    try:
        record = await storage.get_thread(thread_id)
        agent = services.definitions.agents[record.agent_id]
        outline = await storage.message_outline(thread_id)
        check_point(outline, to, thread_id, "rewind")
        later = sum(1 for m in outline if m.seq > to)
        steps = services.settings.default_max_steps
        snapshot = snapshot_as_of(_upto(outline, to), agent, "rewound", max_steps=steps)
        record = record.model_copy(update={"status": "idle", "execution": snapshot, "updated_at": time.time()})
        bus = services.bus
        await bus.attach(thread_id, stored=await storage.last_event_seq(thread_id))
        bus.publisher(thread_id, defer=True)("thread_rewound", {"to": to, "superseded": later})
        try:
            superseded = await storage.rewind_thread(record, to, lease, bus.take_pending(thread_id))
        finally:
            bus.detach(thread_id)
    finally:
        await storage.release_lease(lease)
    return record, superseded


def snapshot_as_of(
    upto: Sequence[Outline], agent: AgentDefinition, reason: str, *, max_steps: int
) -> ExecutionSnapshot:
    """The execution state at the last message of `upto` (a valid point): the counters of that
    message's execution, the session's ended turns, and whose turn is next (`max_steps`: the runtime's
    default for a side without its own)."""
    own = [m for m in upto if m.depth == 0 and m.side is not None and _takes_turn(m)]
    flow = own[-1].flow_id if own else None
    in_flow = [m for m in upto if m.role == "assistant" and m.flow_id == flow and flow is not None]
    side_a = sum(1 for m in in_flow if m.side == "a")
    side_b = sum(1 for m in in_flow if m.side == "b")
    turns = _turns(own)
    current: SideName = "a"
    turn_steps = ended = 0
    if own:
        last = own[-1]
        steps = sum(1 for m in turns[-1] if m.role == "assistant")
        current = last.side or "a"
        if _turn_over(last, agent, steps, max_steps):
            current, ended = ("b" if current == "a" else "a"), len(turns)
        else:
            turn_steps, ended = steps, len(turns) - 1
    return ExecutionSnapshot(
        flow_id=flow or new_id("flow"),
        current_side=current,
        step_count=side_a + side_b,
        side_a_step_count=side_a,
        side_b_step_count=side_b,
        turn_count=ended,
        turn_step_count=turn_steps,
        next_side=current if agent.type == "dual_ai" else None,  # ai_human: the person speaks, side a answers
        stopped=True,
        stopped_by="caller",
        reason=reason,
    )


def _upto(outline: Sequence[Outline], seq: int) -> list[Outline]:
    return [m for m in outline if m.seq <= seq]


def _takes_turn(message: Outline) -> bool:
    """A side's step (its answer) or a person's message: what turns are made of."""
    return message.role == "assistant" or (message.role == "user" and message.side == "b")


def _turns(own: Sequence[Outline]) -> list[list[Outline]]:
    """The side's messages in runs: a new turn starts where the side or the execution changes, and
    each person's message is a turn of its own."""
    turns: list[list[Outline]] = []
    for message in own:
        person = message.role == "user"
        if turns and not person and turns[-1][-1].role != "user":
            previous = turns[-1][-1]
            if previous.side == message.side and previous.flow_id == message.flow_id:
                turns[-1].append(message)
                continue
        turns.append([message])
    return turns


def _turn_over(last: Outline, agent: AgentDefinition, turn_steps: int, max_steps: int) -> bool:
    """Whether the turn of `last` (its side's latest step, or a person's message) ended with it."""
    if last.role == "user":
        return True  # the person's turn: side a answers
    side = agent.side_a if last.side == "a" else agent.side_b
    if side is None:
        return True
    called = {name for _, name in last.calls}
    if side.end_conversation_tool in called or side.stop_tool in called:
        return True
    if not called and side.stop_on_response:
        return True
    return turn_steps >= (side.max_steps or max_steps)
