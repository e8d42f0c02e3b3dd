"""What a resumed execution reads of what its crashed attempts left: the last stored step, and the
turn events they logged.

A message and its event are stored in one transaction (`EventBus.commit`), so no message waits for
its event after a crash. A turn's end and the next turn's start are another matter: they are
published when the turn ends and stored with the next commit, which may be the bus's own write as a
failed attempt ends, before the thread's snapshot says the turn ended. The resume derives that end
again and must not announce it twice; it finds what was logged in the log's tail, read backward from
the end a page at a time, back to the start of a turn before the current one (or the flow's start):
a long thread's resume reads the few events it needs, not its whole log.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.core.messages import Event, ExecutionSnapshot, Message, SideName
from orchestrator.storage.base import Storage

__all__ = ["TAIL_PAGE", "logged_turn_events", "resumed_step"]

TAIL_PAGE = 100
"""Events read per storage call going backward: a turn's events fit in one or two pages."""


def resumed_step(history: Sequence[Message], side: SideName) -> Message | None:
    """The last stored step of the thread's own turns (not a queued tool's announcement), if it is
    `side`'s: the step whose unanswered calls a resume runs."""
    last = next(
        (
            m
            for m in reversed(history)
            if m.depth == 0 and m.role == "assistant" and m.side is not None and not m.metadata.get("queued_by")
        ),
        None,
    )
    return last if last is not None and last.side == side else None


async def logged_turn_events(
    storage: Storage, thread_id: str, snapshot: ExecutionSnapshot, log_end: int
) -> frozenset[tuple[str, int]]:
    """(`turn_started` | `turn_ended`, turn number) of the flow's turn events in the log up to `log_end`,
    from the last `turn_started` of a turn before the snapshot's current one (or the flow's first
    `execution_started`) on: the ones a resume could announce again."""
    current = snapshot.turn_count + 1
    tail: list[Event] = []
    end = log_end
    while end > 0:
        begin = max(0, end - TAIL_PAGE)
        page = await storage.events_after(thread_id, begin, limit=end - begin)
        tail[:0] = page
        for index in range(len(page) - 1, -1, -1):
            if _turn_boundary(page[index], snapshot.flow_id, current):
                return _turn_events(tail[index:], snapshot.flow_id, in_flow=True)
        end = begin
    return _turn_events(tail, snapshot.flow_id)


def _turn_boundary(event: Event, flow_id: str, current: int) -> bool:
    """Where the resume's reading can stop: a turn before `current` starting, or the flow itself."""
    data = event.data if isinstance(event.data, dict) else {}
    if event.type == "turn_started":
        return int(data.get("turn", 0)) < current
    return event.type == "execution_started" and data.get("flow_id") == flow_id and not data.get("resumed")


def _turn_events(events: Sequence[Event], flow_id: str, *, in_flow: bool = False) -> frozenset[tuple[str, int]]:
    """The flow's logged `turn_started` and `turn_ended` events, by turn number (`turn_ended` takes
    the number of the `turn_started` before it)."""
    found: set[tuple[str, int]] = set()
    turn = 0
    for e in events:
        data = e.data if isinstance(e.data, dict) else {}
        if e.type == "execution_started":
            in_flow = data.get("flow_id") == flow_id
        elif in_flow and e.type == "turn_started":
            turn = int(data.get("turn", 0))
            found.add(("turn_started", turn))
        elif in_flow and e.type == "turn_ended":
            found.add(("turn_ended", turn))
    return frozenset(found)
