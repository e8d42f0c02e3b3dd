"""A thread's history as of a message: what `fork` copies and `rewind` goes back to.

Both backends keep an append-only `value_history` (migration `*_history.sql`): a trigger logs every
write of a thread's key-value store and thread-scoped env values, stamped with the thread's last
message seq at that moment. The value of a key "as of message N" is the newest entry (by write order)
with `at_seq <= N` that no rewind superseded; an entry whose value is NULL says the key was deleted.

A point is valid when no tool call is open there: forking or rewinding between a call and its result
(inside a step) is refused with `HistoryPointError`, naming the seq and the nearest valid points
before and after it, rather than silently moved (a caller who wants the step's start says so).

This module is the part both backends share: the outline of a thread's messages (what the checks and
the engine's counters need, without the messages' content), the point check, and the row shapes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.core.messages import EnvType, SideName
from orchestrator.storage.base import StorageError

ValueKind = Literal["value", "env"]


class HistoryPointError(StorageError, ValueError):
    """`seq` is no point a thread can be forked or rewound at; `before` / `after` are the nearest
    valid points (None: there is none on that side)."""

    def __init__(self, message: str, *, seq: int, before: int | None, after: int | None) -> None:
        super().__init__(message)
        self.seq, self.before, self.after = seq, before, after


@dataclass(frozen=True, slots=True)
class Outline:
    """One stored message as the history checks see it: no content, only where it sits in a step."""

    seq: int
    role: str
    side: SideName | None
    depth: int
    flow_id: str | None
    calls: tuple[tuple[str, str], ...]  # (id, name) of each call the runtime runs (answered by a tool message)
    answers: str | None  # a tool message: the call it answers


def outline_of(
    seq: int,
    role: str,
    side: SideName | None,
    depth: int,
    flow_id: str | None,
    tool_calls: str | list[dict[str, object]] | None,
    tool_call_id: str | None,
) -> Outline:
    """An outline from a message's columns; `tool_calls` as stored (JSON text, or decoded)."""
    raw = json.loads(tool_calls) if isinstance(tool_calls, str) else (tool_calls or [])
    calls = tuple((str(c["id"]), str(c["name"])) for c in raw if not c.get("provider_executed"))
    return Outline(int(seq), role, side, int(depth), flow_id, calls, tool_call_id)


def valid_points(outline: Sequence[Outline]) -> list[int]:
    """The seqs at which no call is open (every call made so far has its result stored)."""
    open_calls: set[str] = set()
    points: list[int] = []
    for message in outline:
        open_calls.update(call_id for call_id, _ in message.calls)
        if message.answers is not None:
            open_calls.discard(message.answers)
        if not open_calls:
            points.append(message.seq)
    return points


def check_point(outline: Sequence[Outline], seq: int, thread_id: str, verb: str) -> None:
    """Refuse `seq` unless it is a stored (not superseded) message of the thread at which no call is open."""
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise TypeError(f"{verb}: seq must be an int (a message's seq), got {type(seq).__name__}")
    points = valid_points(outline)
    before = max((p for p in points if p < seq), default=None)
    after = min((p for p in points if p > seq), default=None)
    near = f"nearest valid points: before {before}, after {after}"
    if not any(m.seq == seq for m in outline):
        seqs = f"{outline[0].seq}..{outline[-1].seq}" if outline else "none"
        raise HistoryPointError(
            f"{verb}: thread {thread_id!r} has no message with seq {seq} (its messages' seqs: {seqs}; {near})",
            seq=seq,
            before=before,
            after=after,
        )
    if seq not in points:
        raise HistoryPointError(
            f"{verb}: message {seq} of thread {thread_id!r} is inside a step (a tool call there has no result "
            f"yet); {near}",
            seq=seq,
            before=before,
            after=after,
        )


def attachment_ids(attachments: str | list[dict[str, object]] | None) -> list[str]:
    """The file ids a message's stored attachments refer to."""
    raw = json.loads(attachments) if isinstance(attachments, str) else (attachments or [])
    return [str(a["id"]) for a in raw if isinstance(a, dict) and "id" in a]


@dataclass(frozen=True, slots=True)
class LoggedValue:
    """A key's value as of a point: `value` is JSON text (kind "value") or the env text; `type` for env."""

    kind: ValueKind
    key: str
    value: str
    type: EnvType | None


AS_OF_SQL = """
SELECT h.kind, h.key, h.value, h.type FROM value_history h
WHERE h.id IN (
    SELECT MAX(id) FROM value_history
    WHERE thread_id = {p1} AND at_seq <= {p2} AND superseded = {false}
    GROUP BY kind, key
) AND h.value IS NOT NULL
ORDER BY h.kind, h.key
"""
"""Each key's newest entry as of a point, deleted keys left out ({p1}, {p2}: the backend's placeholders)."""
