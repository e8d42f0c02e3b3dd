"""Tool calls waiting for the outside: the one mechanism behind approvals, deferred results and `state.ask`.

How a call waits. While a step's calls run, a call reaches a *pause* (its tool needs approval, it asked
a question with `state.ask`, it is deferred): `CallPauses.reach` stores nothing yet and raises `CallWaits`
with the waiting record; the dispatcher stores the record (`approval_requested`, `question_asked`,
`result_requested`), stores no result for the call, lets the step's other calls finish and then raises
`CallsWaiting`. The execution ends with reason `awaiting_approval` / `awaiting_result` / `awaiting_answer`
(`awaiting_input` when mixed) and the thread's status is `waiting`: no lease, no task, nothing held.

How it goes on. A decision (`WaitingDesk.decide`) is one conditional write; once no call of the thread
is left open, the caller (Thread, the server, Temporal) resumes the thread. The resume is the crash
resume (`Dispatcher.resume`): the calls of the last step without a stored result run again from their
start, and each reaches its pauses in the same order, now finding them decided (`CallPauses`, a cursor
over the call's records): an approved call runs (with the approver's edited arguments), a rejected one
gets an error result carrying the reason, `ask` returns the stored answer, a deferred call gets the
submitted result without running again. A call whose result is stored never runs again, so none runs twice.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from orchestrator.core.messages import SideName, ToolCall
from orchestrator.core.results import ToolResult
from orchestrator.core.validation import describe
from orchestrator.core.waiting import Decision, WaitingArgumentsError, WaitingCall, WaitingCallError, WaitingKind
from orchestrator.definitions.schema import drop_null_defaults

if TYPE_CHECKING:
    from orchestrator.definitions.define import AgentDefinition, PromptDefinition, ToolDefinition
    from orchestrator.engine.services import Services

__all__ = [
    "CallPauses",
    "CallWaits",
    "CallsWaiting",
    "NotWaitingError",
    "WaitingDesk",
    "approval_needed",
    "decided_result",
]


class CallWaits(Exception):
    """A call reached a pause that is not decided: `record` (`new`: not stored yet). Raised through the
    tool's own code from `state.ask`; a tool that catches it still waits (its `CallPauses` remembers)."""

    def __init__(self, record: WaitingCall, *, new: bool) -> None:
        super().__init__(f"call {record.call_id!r} waits for {record.kind}")
        self.record = record
        self.new = new


class CallsWaiting(Exception):
    """Calls of the step wait: the execution ends, waiting, once the step's other calls are stored."""

    def __init__(self, kinds: set[WaitingKind]) -> None:
        super().__init__(", ".join(sorted(kinds)))
        self.kinds = kinds


class NotWaitingError(Exception):
    """A resume found the thread no longer waiting (another decider's resume got there first)."""


@dataclass
class CallPauses:
    """One run of one call against the call's stored records: each pause it reaches takes the next
    record, in order (so the second `ask` of a call gets the second answer, never another call's)."""

    thread_id: str
    call: ToolCall
    side: SideName
    clock: Callable[[], float]
    records: list[WaitingCall] = field(default_factory=list)
    cursor: int = 0
    waiting: CallWaits | None = None  # set once the call waits, even if the tool swallowed the exception

    def reach(
        self,
        kind: WaitingKind,
        *,
        arguments: dict[str, Any] | None = None,
        tool: str | None = None,
        payload: Any = None,
        timeout: float | None = None,
    ) -> Decision:
        """The decision for this pause, or raise `CallWaits` (a new record, or the open stored one)."""
        if self.cursor < len(self.records):
            record = self.records[self.cursor]
            self.cursor += 1
            if record.kind != kind:
                raise WaitingCallError(
                    f"call {self.call.id!r} ran again and reached {kind!r} where its first run reached "
                    f"{record.kind!r}: a tool must ask the same things in the same order when it runs again"
                )
            if record.decision is None:
                self.waiting = CallWaits(record, new=False)
                raise self.waiting
            return record.decision
        now = self.clock()
        record = WaitingCall(
            thread_id=self.thread_id,
            call_id=self.call.id,
            position=self.cursor,
            kind=kind,
            tool=tool or self.call.name,
            arguments=arguments if arguments is not None else _call_arguments(self.call),
            side=self.side,
            payload=payload,
            requested_at=now,
            expires_at=now + timeout if timeout is not None else None,
        )
        self.cursor += 1
        self.waiting = CallWaits(record, new=True)
        raise self.waiting

    def submitted(self) -> Decision | None:
        """A deferred call's stored result, when one was submitted (it is then not run again); raises
        `CallWaits` while its result is still awaited."""
        for record in self.records:
            if record.kind == "result":
                if record.decision is None:
                    self.waiting = CallWaits(record, new=False)
                    raise self.waiting
                return record.decision
        return None


async def approval_needed(
    target: ToolDefinition | PromptDefinition | AgentDefinition, state: object, args: object
) -> bool:
    """Whether this call of `target` waits for approval: its `needs_approval`, a bool or a function of
    `(state, args)` (sync or async)."""
    rule = getattr(target, "needs_approval", False)
    if not callable(rule):
        return bool(rule)
    verdict = rule(state, args)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return bool(verdict)


def decided_result(tool: str, decision: Decision) -> ToolResult | None:
    """The result a decision gives the call without running it (rejected, stopped, a submitted
    result), or None when it runs (approved)."""
    if decision.kind == "approved":
        return None
    if decision.kind == "rejected":
        reason = decision.reason or "no reason given"
        return ToolResult.fail(f"The call of {tool!r} was rejected and did not run: {reason}")
    if decision.kind == "stopped":
        return ToolResult.fail(f"The call of {tool!r} did not run: {decision.reason or 'the thread was stopped'}")
    if decision.kind == "result" and decision.result is not None:
        return decision.result
    return ToolResult.fail(f"The call of {tool!r} got no usable decision ({decision.kind})")


class WaitingDesk:
    """Where decisions come in, from Python, HTTP or Temporal alike: list a thread's waiting calls,
    decide one (checked, race-free), expire the overdue ones."""

    def __init__(self, services: Services) -> None:
        self._services = services

    async def calls(self, thread_id: str, *, open_only: bool = True) -> list[WaitingCall]:
        """The thread's waiting calls, oldest first (call `expire_thread` first to show overdue ones decided)."""
        return await self._services.storage.waiting_calls(thread_id, open_only=open_only)

    async def expire_thread(self, thread_id: str) -> bool:
        """Reject the thread's overdue approvals; True when that left no call of it open (resume it)."""
        expired = False
        for record in await self._services.storage.waiting_calls(thread_id, open_only=True):
            if _overdue(record, self._services.clock()):
                expired = await self._expire(record) or expired
        return expired and not await self._services.storage.waiting_calls(thread_id, open_only=True)

    async def decide(self, thread_id: str, call_id: str, decision: Decision) -> bool:
        """Decide the open pause of `call_id`. True when no call of the thread is left open (the caller
        resumes it). The same decision said twice is a no-op; a different one for a decided call, one for
        a call that never waited or one that does not fit the wait (approve a question) is a WaitingCallError."""
        storage = self._services.storage
        [*_, record] = await self._existing(thread_id, call_id)
        if record.decision is not None:
            return await self._again(record, decision)
        record.check_decision(decision)
        if _overdue(record, self._services.clock()):
            await self._expire(record)
            raise WaitingCallError(f"call {call_id!r} of thread {thread_id!r} expired before it was decided")
        decision = await self._checked(record, decision)
        if not await storage.decide_waiting_call(thread_id, call_id, record.position, decision, self._services.clock()):
            [*_, record] = await self._existing(thread_id, call_id)  # another decider won the race
            return await self._again(record, decision)
        await self._announce(record, decision)
        await self.expire_thread(thread_id)  # the others' overdue approvals too: the thread may go on now
        return not await storage.waiting_calls(thread_id, open_only=True)

    async def stop(self, thread_id: str, reason: str) -> list[WaitingCall]:
        """Decide every open call `stopped` (a later approval is then an error); the decided records."""
        stopped: list[WaitingCall] = []
        for record in await self._services.storage.waiting_calls(thread_id, open_only=True):
            decision = Decision(kind="stopped", reason=reason)
            if await self._services.storage.decide_waiting_call(
                thread_id, record.call_id, record.position, decision, self._services.clock()
            ):
                stopped.append(record)
                await self._announce(record, decision)
        return stopped

    async def expire_due(self, limit: int = 100) -> set[str]:
        """Reject the overdue approvals of every thread; the threads left with no open call (to resume)."""
        storage = self._services.storage
        threads: set[str] = set()
        for record in await storage.expired_waiting_calls(self._services.clock(), limit):
            if await self._expire(record):
                threads.add(record.thread_id)
        return {t for t in threads if not await storage.waiting_calls(t, open_only=True)}

    # -- helpers --------------------------------------------------------------
    async def _existing(self, thread_id: str, call_id: str) -> list[WaitingCall]:
        records = await self._services.storage.waiting_calls(thread_id, call_id=call_id)
        if not records:
            raise WaitingCallError(f"call {call_id!r} of thread {thread_id!r} is not waiting (no such waiting call)")
        return records

    async def _again(self, record: WaitingCall, decision: Decision) -> bool:
        """A decision for a decided call: the same one again is a no-op, another is refused."""
        if record.decision is not None and record.decision.model_dump() == decision.model_dump():
            return not await self._services.storage.waiting_calls(record.thread_id, open_only=True)
        kind = record.decision.kind if record.decision is not None else "unknown"
        raise WaitingCallError(
            f"call {record.call_id!r} of thread {record.thread_id!r} is not waiting: it was decided already "
            f"({kind}); a decision is made once"
        )

    async def _checked(self, record: WaitingCall, decision: Decision) -> Decision:
        """Edited arguments validated against the tool's schema (as the model's are): an error names the fields.
        An MCP tool's schema is the one its server listed."""
        if decision.kind != "approved" or decision.arguments is None:
            return decision
        definitions, mcp = self._services.definitions, self._services.mcp
        target = definitions.tools.get(record.tool) or definitions.prompts.get(record.tool)
        if target is None and mcp is not None:
            listed = await mcp.exposed_as(record.tool)
            target = listed.definition if listed is not None else None
        model: type[BaseModel] | None = getattr(target, "args", None)
        if model is None:
            return decision
        try:
            parsed = model.model_validate(drop_null_defaults(model, decision.arguments))
        except ValidationError as exc:
            raise WaitingArgumentsError(
                f"approve: the edited arguments for call {record.call_id!r} ({record.tool!r}) do not fit "
                f"the tool's schema: {describe(exc)}"
            ) from None
        return decision.model_copy(update={"arguments": parsed.model_dump(mode="json")})

    async def _expire(self, record: WaitingCall) -> bool:
        timeout = (record.expires_at or 0) - record.requested_at
        decision = Decision(kind="rejected", reason=f"no decision within {timeout:g} s: the approval expired")
        decided = await self._services.storage.decide_waiting_call(
            record.thread_id, record.call_id, record.position, decision, self._services.clock()
        )
        if decided:
            await self._announce(record, decision)
        return decided

    async def _announce(self, record: WaitingCall, decision: Decision) -> None:
        """The decision's event, published from outside any execution (storage numbers it after the log's
        last event; an execution of this process running the thread numbers it in its own sequence)."""
        bus = self._services.bus
        await bus.attach(record.thread_id)
        try:
            publish = bus.publisher(record.thread_id)
            if record.kind == "approval":
                publish(
                    "approval_decided",
                    {
                        "call_id": record.call_id,
                        "tool": record.tool,
                        "decision": decision.kind,
                        "reason": decision.reason,
                        "arguments": decision.arguments,
                    },
                )
            elif record.kind == "result":
                status = decision.result.status if decision.result is not None else None
                publish("result_submitted", {"call_id": record.call_id, "tool": record.tool, "tool_status": status})
            else:
                publish("question_answered", {"call_id": record.call_id, "position": record.position})
            await bus.flush(record.thread_id)
        finally:
            bus.detach(record.thread_id)


def _call_arguments(call: ToolCall) -> dict[str, Any]:
    try:
        parsed = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _overdue(record: WaitingCall, now: float) -> bool:
    return record.decision is None and record.expires_at is not None and record.expires_at <= now
