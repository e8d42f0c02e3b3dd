"""The storage interface every backend implements (SQLite now, PostgreSQL later).

Design rules the executor relies on:
- `append_messages` assigns `seq` (strictly increasing per thread) and returns
  the stored copies.
- `commit` writes a whole `StepWrite` in one transaction, and refuses it with
  `StaleLeaseError` when the fencing token is no longer the thread's current
  one (a stale owner's late write).
- A lease (`acquire_lease`) makes one execution per thread across processes.
- No method blocks the event loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.core.messages import EnvType, EnvValue, Event, Message, MessageEvents, MessagesResult, ThreadRecord
from orchestrator.core.results import AttachmentRef
from orchestrator.core.waiting import Decision, WaitingCall

if TYPE_CHECKING:
    from orchestrator.storage.history import Outline


class StorageError(Exception):
    """Base class for storage failures the caller can act on."""


class SchemaVersionError(StorageError):
    """The database was written by a newer version of this runtime."""


class NotFoundError(StorageError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we don't want that
        return str(self.args[0]) if self.args else ""


class ThreadBusyError(StorageError):
    """Another execution holds the thread's lease; `expires_in` is how long it stays held unless
    renewed (seconds, when the lease's expiry is known)."""

    def __init__(self, message: str, *, expires_in: float | None = None) -> None:
        super().__init__(message)
        self.expires_in = expires_in


class DuplicateEventError(StorageError):
    """An event's seq is already in the thread's log (another process stored it):
    the write that carried it was rolled back whole."""


class StaleLeaseError(StorageError):
    """A write was fenced off: the lease moved to another owner."""


@dataclass(frozen=True)
class Lease:
    thread_id: str
    owner: str
    token: int  # fencing token: strictly increases each time the lease changes hands
    expires_at: float


@dataclass(frozen=True)
class ExecutionStart:
    """What an execution starts from: the lease it took, the thread and its whole history, and
    the last seq in the thread's event log (None: the store did not read it; the executor asks).
    Read under the lease because another process may have run the thread since this one last
    numbered its events."""

    lease: Lease
    thread: ThreadRecord
    history: list[Message]
    last_event_seq: int | None = None


@dataclass
class StepWrite:
    """Everything one step (or one tool result) writes, committed atomically."""

    thread_id: str
    new_messages: list[Message] = field(default_factory=list)
    updated_messages: list[Message] = field(default_factory=list)
    events: Sequence[Event] = ()  # read once, by the write (the bus's may decode as they are read)
    thread: ThreadRecord | None = None  # the thread row to save (status, execution, usage)
    lease_token: int | None = None  # when set, the write is fenced by this token
    # one event per new message, numbered by the bus; stored with the seq the write gives its message
    message_events: MessageEvents | None = None


Scope = Literal["thread", "user"]


class Storage(ABC):
    """Async storage of threads, messages, values, env, files and events."""

    # -- lifecycle ---------------------------------------------------------
    @abstractmethod
    async def open(self) -> None:
        """Connect and migrate. Raises SchemaVersionError for a newer schema."""

    @abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Storage:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- threads -----------------------------------------------------------
    @abstractmethod
    async def create_thread(self, thread: ThreadRecord, events: Sequence[Event] = ()) -> ThreadRecord:
        """Store a new thread, and `events` (its first, all its own) in the same transaction.
        Raises StorageError when a thread with its id exists."""

    @abstractmethod
    async def get_thread(self, thread_id: str) -> ThreadRecord:
        """Raises NotFoundError naming the id."""

    @abstractmethod
    async def save_thread(self, thread: ThreadRecord) -> None: ...

    @abstractmethod
    async def list_threads(
        self, *, user_id: str | None = None, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[ThreadRecord]: ...

    # -- messages ----------------------------------------------------------
    @abstractmethod
    async def append_messages(self, thread_id: str, messages: list[Message]) -> list[Message]:
        """Store new messages; returns them with `seq` assigned."""

    @abstractmethod
    async def update_message(self, message: Message) -> None: ...

    @abstractmethod
    async def get_messages(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        offset: int = 0,
        order: Literal["asc", "desc"] = "asc",
        include_silent: bool = False,
        max_depth: int | None = None,
        include_superseded: bool = False,
    ) -> MessagesResult: ...

    @abstractmethod
    async def get_message(self, thread_id: str, message_id: str) -> Message: ...

    # -- key-value store ---------------------------------------------------
    @abstractmethod
    async def get_value(self, thread_id: str, key: str) -> Any | None: ...

    @abstractmethod
    async def set_value(self, thread_id: str, key: str, value: Any) -> None:
        """`value` is already known to be JSON-serialisable."""

    # -- env values --------------------------------------------------------
    @abstractmethod
    async def get_env(self, scope: Scope, owner_id: str, name: str) -> EnvValue | None: ...

    @abstractmethod
    async def set_env(self, scope: Scope, owner_id: str, name: str, value: str, type: EnvType) -> None: ...

    @abstractmethod
    async def list_env(self, scope: Scope, owner_id: str) -> list[EnvValue]: ...

    # -- files (attachments) -----------------------------------------------
    @abstractmethod
    async def put_file(self, thread_id: str, ref: AttachmentRef, data: bytes) -> AttachmentRef: ...

    @abstractmethod
    async def get_file(self, thread_id: str, file_id: str) -> tuple[AttachmentRef, bytes]: ...

    # -- event log ---------------------------------------------------------
    @abstractmethod
    async def append_events(self, events: list[Event]) -> None: ...

    @abstractmethod
    async def events_after(self, thread_id: str, after: int, limit: int | None = None) -> list[Event]: ...

    @abstractmethod
    async def last_event_seq(self, thread_id: str) -> int: ...

    # -- one transaction per step ------------------------------------------
    @abstractmethod
    async def commit(self, write: StepWrite) -> list[Message]:
        """Write atomically; returns `new_messages` with `seq` assigned. `message_events` are written
        with the seqs assigned (`MessageEvents.rows`), in the same transaction."""

    # -- tool calls waiting for the outside (orchestrator/core/waiting.py) ---
    @abstractmethod
    async def add_waiting_calls(self, calls: Sequence[WaitingCall]) -> None:
        """Store new waiting calls; one already stored at its (thread, call, position) is kept as it is
        (a call run again after a crash asks again, and the first request, maybe decided, counts)."""

    @abstractmethod
    async def waiting_calls(
        self, thread_id: str, *, open_only: bool = False, call_id: str | None = None
    ) -> list[WaitingCall]:
        """The thread's waiting calls (decided ones too unless `open_only`), oldest request first."""

    @abstractmethod
    async def decide_waiting_call(
        self, thread_id: str, call_id: str, position: int, decision: Decision, decided_at: float
    ) -> bool:
        """Decide an open waiting call in one conditional write: True when this write decided it, False
        when it was decided already (or does not exist). Two deciders racing: exactly one gets True."""

    @abstractmethod
    async def expired_waiting_calls(self, now: float, limit: int = 100) -> list[WaitingCall]:
        """Open waiting calls of any thread whose `expires_at` is at or before `now`."""

    # -- one execution per thread ------------------------------------------
    @abstractmethod
    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> Lease:
        """Take the thread, or raise ThreadBusyError if another live owner holds it."""

    @abstractmethod
    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend; raises StaleLeaseError if the lease was lost."""

    @abstractmethod
    async def release_lease(self, lease: Lease) -> None: ...

    # -- time travel (storage/history.py) ------------------------------------
    async def message_outline(self, thread_id: str) -> list[Outline]:
        """The thread's messages (not superseded) without their content: where each sits in a step."""
        raise NotImplementedError(f"{type(self).__name__} does not keep a thread's history (fork, rewind)")

    async def fork_thread(self, source_id: str, at: int, fork: ThreadRecord, events: Sequence[Event] = ()) -> None:
        """Store the new thread `fork` with `source_id`'s messages up to and including seq `at`, its key-value
        store and env values as of `at`, and the files those messages refer to; `events` (the fork's first)
        in the same transaction. Raises HistoryPointError for a point inside a step or no message's."""
        raise NotImplementedError(f"{type(self).__name__} does not keep a thread's history (fork, rewind)")

    async def rewind_thread(self, thread: ThreadRecord, to: int, lease: Lease, events: Sequence[Event] = ()) -> int:
        """Mark the messages, events and value writes after message `to` superseded, put the values back
        as they were at `to`, and save `thread`; in one transaction fenced by `lease`. Returns how many
        messages were superseded."""
        raise NotImplementedError(f"{type(self).__name__} does not keep a thread's history (fork, rewind)")

    async def begin_execution(self, thread_id: str, owner: str, ttl: float) -> ExecutionStart:
        """Take the lease, then read the thread, all its messages (silent ones too) and its last event seq.

        One call because every execution starts with these: a store that can do them in one
        round trip (SQLite: one hop to its thread, one transaction) overrides this."""
        lease = await self.acquire_lease(thread_id, owner, ttl)
        try:
            thread = await self.get_thread(thread_id)
            history = (await self.get_messages(thread_id, include_silent=True)).messages
            last_event = await self.last_event_seq(thread_id)
        except BaseException:
            await self.release_lease(lease)
            raise
        return ExecutionStart(lease, thread, history, last_event)
