"""Messages and the records stored beside them.

A `Message` is what storage keeps, what events carry and what views turn into
provider requests. Its JSON form is the stable on-disk and on-wire form.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import from_json, to_json

from orchestrator.core.results import AttachmentRef
from providers.stream import FinishReason

Role = Literal["system", "user", "assistant", "tool"]
SideName = Literal["a", "b"]
StoppedBy = Literal["a", "b", "caller"]  # "caller": stopped from outside (Thread.stop, HTTP), not by a side


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ToolCall(BaseModel):
    """One call requested by a model. `arguments` is the raw JSON text streamed."""

    model_config = ConfigDict(extra="forbid")

    id: str  # the provider's own id, as in its bytes
    name: str
    arguments: str = "{}"
    provider_executed: bool = False
    signature: str | None = None  # what the provider needs back with the call (a Gemini thoughtSignature)


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: new_id("msg"))
    thread_id: str
    seq: int = 0  # assigned by storage on append; strictly increasing per thread
    side: SideName | None = None  # None: injected, shown to both sides
    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None  # role="tool": the call answered
    name: str | None = None  # role="tool": the tool's name
    tool_status: Literal["success", "error"] | None = None
    attachments: list[AttachmentRef] = Field(default_factory=list)
    provider_blocks: list[dict[str, Any]] | None = None  # provider-executed tool blocks, verbatim
    # How an assistant answer ended (see docs/providers.md). `reasoning`: thinking blocks
    # ({"type": "thinking", "thinking", "signature"} / {"type": "redacted_thinking", "data"}), each with
    # the "provider" family that made it; sent back only to that family, shown to no one else.
    reasoning: list[dict[str, Any]] | None = None
    refusal: str | None = None  # the model's refusal text, kept apart from `content`
    finish: FinishReason | None = None  # "length": the answer was cut by the token limit (truncated)
    silent: bool = False
    depth: int = 0  # 0 for the thread's own turns; +1 per nested prompt-as-tool
    flow_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    # set by `Thread.rewind`: kept for the record (`include_superseded=True`), never sent to a model again
    superseded: bool = False


class MessagesResult(BaseModel):
    messages: list[Message]
    total: int
    has_more: bool


ThreadStatus = Literal[
    "idle", "running", "waiting", "completed", "stopped", "failed"
]  # waiting: for calls (core/waiting.py)
_ENDS_EXECUTION = frozenset({"end_conversation", "stopped"})  # turn end reasons that end the execution too


class ExecutionSnapshot(BaseModel):
    """The durable part of an execution: enough to resume it after a crash."""

    flow_id: str
    current_side: SideName = "a"
    step_count: int = 0
    side_a_step_count: int = 0
    side_b_step_count: int = 0
    turn_count: int = 0
    turn_step_count: int = 0
    forced_side: SideName | None = None
    next_side: SideName | None = None  # left by a fork or a rewind: the side whose turn it was, takes the next
    stopped: bool = False
    stopped_by: StoppedBy | None = None
    reason: str | None = None

    # The transitions: every change of an execution's state is one of these, so each rule (what a
    # turn's end resets, who counts a nested step, that the first end wins) is written once.
    @classmethod
    def following(cls, previous: ExecutionSnapshot | None, flow_id: str) -> ExecutionSnapshot:
        """A new execution's state: session turns carry over from the one before."""
        if previous is None:
            return cls(flow_id=flow_id)
        return cls(flow_id=flow_id, turn_count=previous.turn_count, forced_side=previous.next_side)

    def resumed(self) -> ExecutionSnapshot:
        """The state of a crashed execution taken up again: what it counted stays, it is no longer ended."""
        return self.model_copy(update={"stopped": False, "stopped_by": None, "reason": None})

    def end(self, by: StoppedBy, reason: str) -> None:
        """End the execution; the first end is the one kept (a stop said before a side's end wins)."""
        if not self.stopped:
            self.stopped, self.stopped_by, self.reason = True, by, reason

    def force_side(self, side: SideName) -> None:
        """`side` takes the next turn, after the current step."""
        self.forced_side = side

    def take_forced_side(self) -> None:
        """A side forced while the thread rested takes the first turn."""
        if self.forced_side is not None:
            self.current_side, self.forced_side = self.forced_side, None

    def count_step(self, side: SideName, *, nested: bool) -> None:
        """A step counts in `step_count` and its side's counter, also a nested one (a prompt called as
        a tool by that side), so step_count == side a + side b; only the side's own steps count toward
        its turn's `max_steps`."""
        self.step_count += 1
        if not nested:
            self.turn_step_count += 1
        if side == "a":
            self.side_a_step_count += 1
        else:
            self.side_b_step_count += 1

    def advance_turn(self, ended: SideName, reason: str) -> None:
        """`ended`'s turn is over and counted. Ended by the conversation's end or a stop, so is the
        execution; else the next turn is the forced side's, or the other side's, from its first step."""
        self.turn_count += 1
        if reason in _ENDS_EXECUTION:
            self.end(ended, reason)
            return
        self.current_side = self.forced_side or ("b" if ended == "a" else "a")
        self.forced_side = None
        self.turn_step_count = 0

    def person_spoke(self) -> None:
        """The person's message is their turn (side b of an ai_human agent); side a answers unless a
        side was forced. A side a turn it interrupts (a resumed one) keeps the steps it took."""
        self.turn_count += 1
        self.current_side = self.forced_side or "a"
        self.forced_side = None


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    requests: int = 0

    def add(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost=self.cost + other.cost,
            requests=self.requests + other.requests,
        )


class ThreadRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: new_id("thr"))
    agent_id: str
    user_id: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    parent_id: str | None = None
    depth: int = 0
    status: ThreadStatus = "idle"
    execution: ExecutionSnapshot | None = None
    usage: Usage = Field(default_factory=Usage)
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    forked_from: str | None = None  # the thread this one was forked from (`Thread.fork`)
    forked_at: int | None = None  # the message seq of `forked_from` it was forked at


EnvType = Literal["text", "secret"]


class EnvValue(BaseModel):
    name: str
    value: str = Field(repr=False)
    type: EnvType = "secret"

    def __str__(self) -> str:  # never print a secret by accident
        return f"{self.name}={'***' if self.type == 'secret' else self.value}"


class Event(BaseModel):
    """One entry of a thread's event log. `seq` is per thread and strictly increasing."""

    thread_id: str
    seq: int
    type: str
    data: Any = None
    at: float = Field(default_factory=time.time)


_EVENT_FIELDS = set(Event.model_fields)
"""The fields set of every event built by `event_of`: all fields are given, so one shared set says what a set per
event would (pydantic adds a field's name on assignment, already there)."""


def event_of(thread_id: str, seq: int, type: str, at: float, data: Any) -> Event:
    """An `Event` from fields that are ours: no validation, and no fields set of its own for the collector to walk
    while it waits to be stored or read."""
    return Event.model_construct(_EVENT_FIELDS, thread_id=thread_id, seq=seq, type=type, data=data, at=at)


class EncodedEvents(Sequence[Event]):
    """One thread's durable events as the log stores them: `(seq, type, at, data as JSON)`.

    The event bus hands a step's write its events this way. The write can wait a while before storage
    runs it (at 1,000 conversations in flight nearly all of them wait in the SQLite thread's queue), and
    as models each event and its payload were a dozen objects for every full collection to walk. Storage
    writes the rows as they are; reading the sequence decodes each event."""

    __slots__ = ("entries", "thread_id")

    def __init__(self, thread_id: str, entries: list[tuple[int, str, float, bytes]]) -> None:
        self.thread_id = thread_id
        self.entries = entries  # oldest first

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            return [self._decoded(entry) for entry in self.entries[index]]
        return self._decoded(self.entries[index])

    def __iter__(self) -> Iterator[Event]:
        return (self._decoded(entry) for entry in self.entries)

    @property
    def seqs(self) -> list[int]:
        return [entry[0] for entry in self.entries]

    def _decoded(self, entry: tuple[int, str, float, bytes]) -> Event:
        seq, type_, at, data = entry
        return event_of(self.thread_id, seq, type_, at, from_json(data))


class MessageEvents:
    """The events that announce a write's new messages, numbered before the write and stored by it.

    A message's event carries the message, `seq` included, and storage gives a message its `seq` inside
    the transaction (`MAX(seq) + 1`: writers outside the lease exist). So each payload waits here as the
    message's JSON (redacted as the bus redacts) without its `seq`, and storage writes the event's row
    with the seq it gave the message (`rows`). A message and its event are stored together or not at
    all: nothing is left for a resume to publish again."""

    __slots__ = ("entries", "thread_id")

    def __init__(self, thread_id: str, entries: list[tuple[int, str, float, bytes]]) -> None:
        self.thread_id = thread_id
        self.entries = entries  # (event seq, type, at, the message's JSON without its seq): one per new message

    def __len__(self) -> int:
        return len(self.entries)

    @staticmethod
    def body(message: Mapping[str, Any]) -> bytes:
        """A message's JSON form (`model_dump(mode="json")`, redacted) as it waits for its seq."""
        return to_json({k: v for k, v in message.items() if k != "seq"})

    def rows(self, stored: Sequence[Message]) -> list[tuple[int, str, float, bytes]]:
        """The events as the log keeps them, `(seq, type, at, data as JSON)`, for the new messages as
        storage stored them. The seq goes first in each payload: a message's JSON always has an `id`."""
        if len(stored) != len(self.entries):
            raise ValueError(f"MessageEvents: {len(self.entries)} events for {len(stored)} new messages")
        return [
            (seq, type_, at, b'{"seq":%d,%b' % (message.seq, body[1:]))
            for (seq, type_, at, body), message in zip(self.entries, stored, strict=True)
        ]
