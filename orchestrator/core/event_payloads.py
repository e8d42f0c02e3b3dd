"""Built-in event payloads as TypedDicts, and `Publish`: a publisher whose payloads mypy checks.

`event_types.py` holds the pydantic models clients validate frames with (and the JSON schema); the
runtime's own publishers do not build those models (`text_delta` is published once per streamed chunk),
they pass plain dicts. These TypedDicts are those dicts' types, one per built-in event, and `Publish`
has one overload per built-in event name, so a publisher that gives an event the wrong payload is a
mypy error, not only a failure under `ORCHESTRATOR_CHECK_EVENTS=1`. `tests/test_event_payloads.py`
keeps the two descriptions equal, field by field.

`message_created` and `tool_result` are not here: the bus numbers and stores a message's event with the
message itself (`EventBus.commit`), so no publisher announces one. An event whose name is known only at
run time (a tool's `state.emit`) is an `EmittedEventName`, published with `EventBus.publish` and checked
when published.

Its annotations are evaluated (no `from __future__ import annotations`): Python 3.11 reads a TypedDict's
`NotRequired` keys only from evaluated annotations.
"""

from typing import Literal, NewType, NotRequired, Protocol, TypedDict, overload

from orchestrator.core.messages import SideName, StoppedBy
from providers.stream import FinishReason

__all__ = [
    "AnswerEndName",
    "AnswerEndPayload",
    "ApprovalDecidedPayload",
    "ApprovalRequestedPayload",
    "DeltaName",
    "DeltaPayload",
    "EmittedEventName",
    "ExecutionStartedPayload",
    "ExecutionStoppedPayload",
    "InvokedCallPayload",
    "ModelFallbackPayload",
    "ModelRefusedPayload",
    "ProviderFailurePayload",
    "Publish",
    "QuestionAnsweredPayload",
    "QuestionAskedPayload",
    "ResultRequestedPayload",
    "ResultSubmittedPayload",
    "RunFailurePayload",
    "StepStartedPayload",
    "StreamRestartedPayload",
    "SubagentStartedPayload",
    "ThreadCreatedPayload",
    "ThreadForkedPayload",
    "ThreadRewoundPayload",
    "ToolCallStartedPayload",
    "ToolInvokedPayload",
    "ToolInvokedResultPayload",
    "ToolProgressPayload",
    "TurnEndReason",
    "TurnEndedPayload",
    "TurnStartedPayload",
]

EmittedEventName = NewType("EmittedEventName", str)
"""An event type chosen at run time (`state.emit`): a custom one, or a built-in one whose payload the caller
checked. Its own type so that a built-in name written in the runtime's code cannot skip `Publish`'s check."""

TurnEndReason = Literal["stopped", "end_conversation", "stop_tool", "forced", "response", "max_steps"]
DeltaName = Literal["text_delta", "reasoning_delta"]
AnswerEndName = Literal["model_truncated", "model_content_filtered", "model_finish_error"]


class ThreadCreatedPayload(TypedDict):
    agent: str
    user_id: str | None


class ThreadForkedPayload(TypedDict):
    forked_from: str
    forked_at: int


class ThreadRewoundPayload(TypedDict):
    to: int
    superseded: int


class ExecutionStartedPayload(TypedDict):
    flow_id: str
    resumed: bool


class TurnStartedPayload(TypedDict):
    side: SideName
    turn: int


class TurnEndedPayload(TypedDict):
    side: SideName
    reason: TurnEndReason


class StepStartedPayload(TypedDict):
    side: SideName
    step: int
    model: str


class StreamRestartedPayload(TypedDict):
    side: SideName
    attempt: int
    reason: str


class DeltaPayload(TypedDict):
    side: SideName
    depth: int
    text: str


ModelFallbackPayload = TypedDict("ModelFallbackPayload", {"from": str, "to": str, "error": str})


class AnswerEndPayload(TypedDict):
    side: SideName
    depth: int
    message_id: str
    finish: FinishReason | None
    finish_reason: str | None
    dropped_tool_calls: NotRequired[list[str]]


class ModelRefusedPayload(AnswerEndPayload):
    refusal: str | None


class ToolCallStartedPayload(TypedDict):
    id: str
    name: str
    index: int
    progress_argument: str | None
    progress_value: str | None
    side: SideName
    depth: int


class InvokedCallPayload(TypedDict):
    """What `tool_invoked` and `tool_invoked_result` say of the call (`state.invoke_tool`)."""

    id: str
    parent_id: str
    name: str
    side: SideName
    depth: int


class ToolInvokedPayload(InvokedCallPayload):
    arguments: dict[str, object]


class ToolInvokedResultPayload(InvokedCallPayload):
    tool_status: Literal["success", "error"]
    content: str


class SubagentStartedPayload(TypedDict):
    thread_id: str
    agent: str
    call_id: str


class ToolProgressPayload(TypedDict):
    tool_call_id: str | None
    name: str
    progress: float
    total: float | None
    message: str | None


class ExecutionStoppedPayload(TypedDict):
    flow_id: str
    reason: str
    stopped_by: StoppedBy | None


class ProviderFailurePayload(TypedDict):
    flow_id: str
    error: str
    provider: str | None
    status: int | None


class RunFailurePayload(TypedDict):
    code: Literal["thread_busy", "internal_error"]
    error: str


class ApprovalRequestedPayload(TypedDict):
    call_id: str
    tool: str
    arguments: dict[str, object]
    side: SideName
    expires_at: float | None


class ResultRequestedPayload(TypedDict):
    call_id: str
    tool: str
    arguments: dict[str, object]
    side: SideName


class QuestionAskedPayload(TypedDict):
    call_id: str
    tool: str
    position: int
    payload: object
    side: SideName


class ApprovalDecidedPayload(TypedDict):
    call_id: str
    tool: str
    decision: Literal["approved", "rejected", "result", "answer", "stopped"]
    reason: str | None
    arguments: dict[str, object] | None


class ResultSubmittedPayload(TypedDict):
    call_id: str
    tool: str
    tool_status: Literal["success", "error"] | None


class QuestionAnsweredPayload(TypedDict):
    call_id: str
    position: int


class Publish(Protocol):
    """Publish a built-in event on one thread (`EventBus.publisher`): each name takes its own payload."""

    @overload
    def __call__(self, type: Literal["thread_created"], data: ThreadCreatedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["thread_forked"], data: ThreadForkedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["thread_rewound"], data: ThreadRewoundPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["execution_started"], data: ExecutionStartedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["turn_started"], data: TurnStartedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["turn_ended"], data: TurnEndedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["step_started"], data: StepStartedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["stream_restarted"], data: StreamRestartedPayload, /) -> None: ...
    @overload
    def __call__(self, type: DeltaName, data: DeltaPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["model_fallback"], data: ModelFallbackPayload, /) -> None: ...
    @overload
    def __call__(self, type: AnswerEndName, data: AnswerEndPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["model_refused"], data: ModelRefusedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["tool_call_started"], data: ToolCallStartedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["tool_invoked"], data: ToolInvokedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["tool_invoked_result"], data: ToolInvokedResultPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["tool_progress"], data: ToolProgressPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["subagent_started"], data: SubagentStartedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["approval_requested"], data: ApprovalRequestedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["result_requested"], data: ResultRequestedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["question_asked"], data: QuestionAskedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["approval_decided"], data: ApprovalDecidedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["result_submitted"], data: ResultSubmittedPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["question_answered"], data: QuestionAnsweredPayload, /) -> None: ...
    @overload
    def __call__(self, type: Literal["execution_stopped"], data: ExecutionStoppedPayload, /) -> None: ...
    @overload
    def __call__(
        self, type: Literal["execution_failed"], data: ProviderFailurePayload | RunFailurePayload, /
    ) -> None: ...
    def __call__(self, type: str, data: object, /) -> None:
        """Number the event and fan it out (`EventBus.publish`); the overloads above are its types, read
        at run time too (`typing.get_overloads`: tests/test_event_payloads.py holds them to the models)."""
