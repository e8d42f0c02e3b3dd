"""The `data` of each built-in event: exactly the fields the runtime emits for that type (extra fields are
refused). `event_types.py` wraps each in its event's envelope; the emission sites pass the TypedDicts of
`event_payloads.py`, which these models check when `ORCHESTRATOR_CHECK_EVENTS=1`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from orchestrator.core.event_payloads import TurnEndReason
from orchestrator.core.messages import SideName, StoppedBy
from providers.stream import FinishReason

__all__ = [
    "AnswerEndData",
    "ApprovalDecidedData",
    "ApprovalRequestedData",
    "DeltaData",
    "EventData",
    "ExecutionStartedData",
    "ExecutionStoppedData",
    "ModelFallbackData",
    "ModelRefusedData",
    "OutputDeltaData",
    "ProviderFailureData",
    "QuestionAnsweredData",
    "QuestionAskedData",
    "ResultRequestedData",
    "ResultSubmittedData",
    "RunFailureData",
    "StepStartedData",
    "StreamRestartedData",
    "SubagentStartedData",
    "ThreadCreatedData",
    "ThreadForkedData",
    "ThreadRewoundData",
    "ToolCallStartedData",
    "ToolInvokedData",
    "ToolInvokedResultData",
    "ToolProgressData",
    "TurnEndedData",
    "TurnStartedData",
]


class EventData(BaseModel):
    """An event's `data`: exactly these fields."""

    model_config = ConfigDict(extra="forbid")


class ThreadCreatedData(EventData):
    agent: str
    user_id: str | None


class ThreadForkedData(EventData):
    forked_from: str = Field(description="The thread this one was forked from")
    forked_at: int = Field(description="The message seq of `forked_from` the fork's history ends at")


class ThreadRewoundData(EventData):
    to: int = Field(description="The message seq the thread continues from")
    superseded: int = Field(description="How many later messages were marked superseded")


class ExecutionStartedData(EventData):
    flow_id: str
    resumed: bool = Field(description="True when a crashed execution is taken up again")


class TurnStartedData(EventData):
    side: SideName
    turn: int = Field(description="The thread's turn number, from 1")


class TurnEndedData(EventData):
    side: SideName
    reason: TurnEndReason


class StepStartedData(EventData):
    side: SideName
    step: int = Field(description="The execution's step number, from 1")
    model: str = Field(description="The model alias called")


class StreamRestartedData(EventData):
    side: SideName
    attempt: int
    reason: str


class DeltaData(EventData):
    side: SideName
    depth: int = Field(description="0 for the thread's own turns; +1 per nested prompt called as a tool")
    text: str


class OutputDeltaData(DeltaData):
    upto: int = Field(description="Characters of the answer so far, from its start, that `close` completes")
    close: str = Field(description="What completes them: json.loads(answer[:upto] + close) is the partial object")


class ModelFallbackData(EventData):
    from_: str = Field(alias="from", description="The model alias that failed")
    to: str = Field(description="The alias tried next")
    error: str


class AnswerEndData(EventData):
    """How an answer ended when it did not simply stop (see docs/providers.md)."""

    side: SideName
    depth: int
    message_id: str
    finish: FinishReason | None
    finish_reason: str | None = Field(description="The provider's own finish reason")
    dropped_tool_calls: list[str] = Field(
        default_factory=list, description="Calls left unrun because the answer was cut (model_truncated only)"
    )


class ModelRefusedData(AnswerEndData):
    refusal: str | None


class ToolCallStartedData(EventData):
    id: str
    name: str
    index: int
    progress_argument: str | None
    progress_value: str | None
    side: SideName
    depth: int


class _InvokedCall(EventData):
    id: str
    parent_id: str = Field(description="The id of the tool call that invoked it")
    name: str
    side: SideName
    depth: int


class ToolInvokedData(_InvokedCall):
    arguments: dict[str, JsonValue]


class ToolInvokedResultData(_InvokedCall):
    tool_status: Literal["success", "error"]
    content: str


class SubagentStartedData(EventData):
    thread_id: str = Field(description="The child thread")
    agent: str
    call_id: str


class ToolProgressData(EventData):
    tool_call_id: str | None
    name: str
    progress: float
    total: float | None
    message: str | None


class ApprovalRequestedData(EventData):
    call_id: str = Field(description="The tool call waiting; decide it with POST /threads/{id}/calls/{call_id}/...")
    tool: str
    arguments: dict[str, JsonValue]
    side: SideName
    expires_at: float | None = Field(description="Unix time it is rejected unless decided; null: never")


class ResultRequestedData(EventData):
    call_id: str
    tool: str
    arguments: dict[str, JsonValue]
    side: SideName


class QuestionAskedData(EventData):
    call_id: str
    tool: str
    position: int = Field(description="Which pause of the call (0 first)")
    payload: JsonValue = Field(description="What the tool asked (`state.ask(payload)`)")
    side: SideName


class ApprovalDecidedData(EventData):
    call_id: str
    tool: str
    decision: Literal["approved", "rejected", "result", "answer", "stopped"]
    reason: str | None
    arguments: dict[str, JsonValue] | None = Field(description="The approver's edited arguments, if any")


class ResultSubmittedData(EventData):
    call_id: str
    tool: str
    tool_status: Literal["success", "error"] | None


class QuestionAnsweredData(EventData):
    call_id: str
    position: int


class ExecutionStoppedData(EventData):
    flow_id: str
    reason: str = Field(description="Why it ended: a turn's end reason, max_session_turns, a stop's reason, or rest")
    stopped_by: StoppedBy | None


class ProviderFailureData(EventData):
    """The executor's failure: a model call failed for good."""

    flow_id: str
    error: str
    provider: str | None
    status: int | None


class RunFailureData(EventData):
    """The server's failure of a background run that never reached the executor's own report."""

    code: Literal["thread_busy", "internal_error"]
    error: str
