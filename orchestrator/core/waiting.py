"""A tool call waiting for the outside: an approval, a result supplied later, or an answer to `state.ask`.

One record per pause of one call (`WaitingCall`), kept by storage beside the thread. A call may pause
more than once (approved first, then asking twice): its records are numbered by `position`, in the
order the call reached them, which is how a call run again after the answers finds each of its own
(`ask` number two gets answer number two, never another parallel call's).

The record is the truth the resume reads: a call whose record is decided runs (or gets its rejection,
its result, its answer); one whose record is open keeps the thread waiting. A decision is written once
(storage's conditional update), so two approvers racing cannot both decide.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.messages import SideName
from orchestrator.core.results import ToolResult

__all__ = [
    "Decision",
    "DecisionKind",
    "WaitingArgumentsError",
    "WaitingCall",
    "WaitingCallError",
    "WaitingKind",
    "awaiting_reason",
]

WaitingKind = Literal["approval", "result", "answer"]
"""What the call waits for: a person's yes/no (`needs_approval`), a result from another system
(`deferred`), or the answer to a question the tool asked (`state.ask`)."""

DecisionKind = Literal["approved", "rejected", "result", "answer", "stopped"]
"""How a waiting call was decided; `stopped`: the thread was stopped while it waited."""

_DECIDES: dict[WaitingKind, frozenset[DecisionKind]] = {
    "approval": frozenset({"approved", "rejected", "stopped"}),
    "result": frozenset({"result", "stopped"}),
    "answer": frozenset({"answer", "stopped"}),
}


class WaitingCallError(ValueError):
    """A decision that cannot apply: the call is unknown, not waiting (decided already, or the thread
    moved on), waiting for something else, or the decision's content is invalid. The message names the
    call id and what was expected."""


class WaitingArgumentsError(WaitingCallError):
    """An approval's edited arguments do not fit the tool's schema (nothing was stored)."""


class Decision(BaseModel):
    """What the outside said for one waiting call."""

    model_config = ConfigDict(extra="forbid")

    kind: DecisionKind
    arguments: dict[str, Any] | None = None  # approved with edited arguments (checked against the tool's schema)
    reason: str | None = None  # rejected / stopped: what the model reads
    result: ToolResult | None = None  # a deferred call's result
    answer: Any = None  # the answer `state.ask` returns (JSON)


class WaitingCall(BaseModel):
    """One waiting call of a thread, as storage keeps it and `thread.waiting_calls()` lists it."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str
    call_id: str = Field(description="The tool call's id, as in the assistant message")
    position: int = Field(default=0, ge=0, description="Which pause of this call (0 first)")
    kind: WaitingKind
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    side: SideName
    payload: Any = Field(default=None, description="`state.ask`'s question (JSON)")
    requested_at: float
    expires_at: float | None = None
    decision: Decision | None = None
    decided_at: float | None = None

    @property
    def open(self) -> bool:
        return self.decided_at is None

    def check_decision(self, decision: Decision) -> None:
        """Raise WaitingCallError when `decision` does not answer this kind of wait."""
        if decision.kind not in _DECIDES[self.kind]:
            expected = {"approval": "approve or reject", "result": "submit_result", "answer": "answer"}[self.kind]
            raise WaitingCallError(
                f"call {self.call_id!r} of thread {self.thread_id!r} waits for {_ARTICLE[self.kind]}; "
                f"use {expected}, not {decision.kind!r}"
            )


_ARTICLE: dict[WaitingKind, str] = {"approval": "an approval", "result": "a result", "answer": "an answer"}


def awaiting_reason(kinds: set[WaitingKind]) -> str:
    """The execution's end reason while calls wait: `awaiting_approval`, `awaiting_result` or
    `awaiting_answer` when they all wait for one kind of thing, `awaiting_input` when mixed."""
    if len(kinds) == 1:
        return f"awaiting_{next(iter(kinds))}"
    return "awaiting_input"
