"""Typed events: one pydantic model per built-in event type, and their union.

A thread's event (`messages.Event`) is an envelope the bus fills in
(`thread_id`, `seq`, `at`) around a payload the publisher chooses (`type`,
`data`). Clients receive the two flattened into one frame, so each model here
is a whole frame: the envelope's fields plus `type: Literal[...]` and a `data`
model of exactly the fields the runtime emits for that type (extra fields are
refused). Everything else a tool sends with `state.emit(event, data)` is a
`CustomEvent`: any type name that is not a built-in one, with free-form JSON
`data`; a custom event may not borrow a built-in name.

`TypedEvent` is the union, discriminated by `type`; `parse_event` validates a
frame (an `Event`, a dict or JSON text) into its model; `events_json_schema`
is the JSON schema the CLI prints (`orchestrator schema events`), the server
serves (`GET /schema/events`) and docs/server.md is checked against.

The emission sites pass plain dicts, not these models: `text_delta` is
published once per streamed chunk and building a model there would cost time
in the executor's hot loop. Those dicts are typed (`event_payloads.py`: a
TypedDict per event, and a publisher overloaded on the event's name), so mypy
refuses a wrong shape where it is written; the bus also checks each payload
against its model here when `ORCHESTRATOR_CHECK_EVENTS=1` (the test suite sets
it), for what mypy cannot see (see `check_payload`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag, TypeAdapter, field_validator

from orchestrator.core.event_data import (
    AnswerEndData,
    ApprovalDecidedData,
    ApprovalRequestedData,
    DeltaData,
    ExecutionStartedData,
    ExecutionStoppedData,
    ModelFallbackData,
    ModelRefusedData,
    OutputDeltaData,
    ProviderFailureData,
    QuestionAnsweredData,
    QuestionAskedData,
    ResultRequestedData,
    ResultSubmittedData,
    RunFailureData,
    StepStartedData,
    StreamRestartedData,
    SubagentStartedData,
    ThreadCreatedData,
    ThreadForkedData,
    ThreadRewoundData,
    ToolCallStartedData,
    ToolInvokedData,
    ToolInvokedResultData,
    ToolProgressData,
    TurnEndedData,
    TurnStartedData,
)
from orchestrator.core.event_payloads import TurnEndReason
from orchestrator.core.messages import Event, Message

__all__ = [
    "QuestionAnsweredData",
    "QuestionAnsweredEvent",
    "ResultSubmittedData",
    "ResultSubmittedEvent",
    "ApprovalDecidedData",
    "ApprovalDecidedEvent",
    "QuestionAskedData",
    "QuestionAskedEvent",
    "ResultRequestedData",
    "ResultRequestedEvent",
    "ApprovalRequestedData",
    "ApprovalRequestedEvent",
    "AnswerEndData",
    "BUILTIN_EVENTS",
    "BUILTIN_EVENT_TYPES",
    "CustomEvent",
    "DeltaData",
    "EVENTS",
    "ExecutionFailedEvent",
    "ExecutionStartedData",
    "ExecutionStartedEvent",
    "ExecutionStoppedData",
    "ExecutionStoppedEvent",
    "MessageCreatedEvent",
    "ModelContentFilteredEvent",
    "ModelFallbackData",
    "ModelFallbackEvent",
    "ModelFinishErrorEvent",
    "ModelRefusedData",
    "ModelRefusedEvent",
    "ModelTruncatedEvent",
    "ProviderFailureData",
    "ReasoningDeltaEvent",
    "OutputDeltaEvent",
    "RunFailureData",
    "StepStartedData",
    "StepStartedEvent",
    "StreamRestartedData",
    "StreamRestartedEvent",
    "SubagentStartedData",
    "SubagentStartedEvent",
    "TextDeltaEvent",
    "ThreadCreatedData",
    "ThreadCreatedEvent",
    "ThreadForkedData",
    "ThreadForkedEvent",
    "ThreadRewoundData",
    "ThreadRewoundEvent",
    "ToolCallStartedData",
    "ToolCallStartedEvent",
    "ToolInvokedData",
    "ToolInvokedEvent",
    "ToolInvokedResultData",
    "ToolInvokedResultEvent",
    "ToolProgressData",
    "ToolProgressEvent",
    "ToolResultEvent",
    "TurnEndReason",
    "TurnEndedData",
    "TurnEndedEvent",
    "TurnStartedData",
    "TurnStartedEvent",
    "TypedEvent",
    "check_payload",
    "event_model",
    "events_json_schema",
    "parse_event",
]


class _Envelope(BaseModel):
    """What the bus adds to every payload: the thread, its next seq and the time."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str
    seq: int = Field(ge=1, description="Per thread, strictly increasing; reconnect with ?after=<last seq seen>")
    at: float = Field(description="Unix time the event was published")


# -- the events -----------------------------------------------------------------


class ThreadCreatedEvent(_Envelope):
    type: Literal["thread_created"]
    data: ThreadCreatedData


class ExecutionStartedEvent(_Envelope):
    type: Literal["execution_started"]
    data: ExecutionStartedData


class TurnStartedEvent(_Envelope):
    type: Literal["turn_started"]
    data: TurnStartedData


class TurnEndedEvent(_Envelope):
    type: Literal["turn_ended"]
    data: TurnEndedData


class StepStartedEvent(_Envelope):
    type: Literal["step_started"]
    data: StepStartedData


class StreamRestartedEvent(_Envelope):
    type: Literal["stream_restarted"]
    data: StreamRestartedData


class TextDeltaEvent(_Envelope):
    """Live only: never stored, not replayed after the ring of recent events."""

    type: Literal["text_delta"]
    data: DeltaData


class ReasoningDeltaEvent(_Envelope):
    """Live only, like text_delta."""

    type: Literal["reasoning_delta"]
    data: DeltaData


class OutputDeltaEvent(_Envelope):
    """Live only, like text_delta: a typed answer's text delta and how to complete the answer so far."""

    type: Literal["output_delta"]
    data: OutputDeltaData


class ModelFallbackEvent(_Envelope):
    type: Literal["model_fallback"]
    data: ModelFallbackData


class ModelTruncatedEvent(_Envelope):
    type: Literal["model_truncated"]
    data: AnswerEndData


class ModelRefusedEvent(_Envelope):
    type: Literal["model_refused"]
    data: ModelRefusedData


class ModelContentFilteredEvent(_Envelope):
    type: Literal["model_content_filtered"]
    data: AnswerEndData


class ModelFinishErrorEvent(_Envelope):
    type: Literal["model_finish_error"]
    data: AnswerEndData


class MessageCreatedEvent(_Envelope):
    type: Literal["message_created"]
    data: Message


class ToolResultEvent(_Envelope):
    """A tool's result message (role `tool`)."""

    type: Literal["tool_result"]
    data: Message


class ToolCallStartedEvent(_Envelope):
    type: Literal["tool_call_started"]
    data: ToolCallStartedData


class ToolInvokedEvent(_Envelope):
    type: Literal["tool_invoked"]
    data: ToolInvokedData


class ToolInvokedResultEvent(_Envelope):
    type: Literal["tool_invoked_result"]
    data: ToolInvokedResultData


class SubagentStartedEvent(_Envelope):
    type: Literal["subagent_started"]
    data: SubagentStartedData


class ToolProgressEvent(_Envelope):
    """An MCP server's progress notification for a running call."""

    type: Literal["tool_progress"]
    data: ToolProgressData


class ThreadForkedEvent(_Envelope):
    type: Literal["thread_forked"]
    data: ThreadForkedData


class ThreadRewoundEvent(_Envelope):
    type: Literal["thread_rewound"]
    data: ThreadRewoundData


class ApprovalRequestedEvent(_Envelope):
    type: Literal["approval_requested"]
    data: ApprovalRequestedData


class ResultRequestedEvent(_Envelope):
    type: Literal["result_requested"]
    data: ResultRequestedData


class QuestionAskedEvent(_Envelope):
    type: Literal["question_asked"]
    data: QuestionAskedData


class ApprovalDecidedEvent(_Envelope):
    type: Literal["approval_decided"]
    data: ApprovalDecidedData


class ResultSubmittedEvent(_Envelope):
    type: Literal["result_submitted"]
    data: ResultSubmittedData


class QuestionAnsweredEvent(_Envelope):
    type: Literal["question_answered"]
    data: QuestionAnsweredData


class ExecutionStoppedEvent(_Envelope):
    type: Literal["execution_stopped"]
    data: ExecutionStoppedData


class ExecutionFailedEvent(_Envelope):
    type: Literal["execution_failed"]
    data: ProviderFailureData | RunFailureData


BUILTIN_EVENTS: tuple[type[_Envelope], ...] = (
    ThreadCreatedEvent,
    ThreadForkedEvent,
    ThreadRewoundEvent,
    ExecutionStartedEvent,
    TurnStartedEvent,
    StepStartedEvent,
    TextDeltaEvent,
    ReasoningDeltaEvent,
    OutputDeltaEvent,
    StreamRestartedEvent,
    ModelFallbackEvent,
    ModelTruncatedEvent,
    ModelRefusedEvent,
    ModelContentFilteredEvent,
    ModelFinishErrorEvent,
    ToolCallStartedEvent,
    MessageCreatedEvent,
    ToolResultEvent,
    ToolInvokedEvent,
    ToolInvokedResultEvent,
    ToolProgressEvent,
    SubagentStartedEvent,
    TurnEndedEvent,
    ApprovalRequestedEvent,
    ResultRequestedEvent,
    QuestionAskedEvent,
    ApprovalDecidedEvent,
    ResultSubmittedEvent,
    QuestionAnsweredEvent,
    ExecutionStoppedEvent,
    ExecutionFailedEvent,
)


def _type_name(model: type[_Envelope]) -> str:
    (name,) = get_args(model.model_fields["type"].annotation)
    return str(name)


_BY_TYPE: dict[str, type[_Envelope]] = {_type_name(m): m for m in BUILTIN_EVENTS}
BUILTIN_EVENT_TYPES: frozenset[str] = frozenset(_BY_TYPE)


class CustomEvent(_Envelope):
    """A tool's own event (`state.emit(event, data)`): any name but a built-in one, any JSON data."""

    type: str = Field(min_length=1, json_schema_extra={"not": {"enum": list[JsonValue](sorted(BUILTIN_EVENT_TYPES))}})
    data: JsonValue = None

    @field_validator("type")
    @classmethod
    def _not_builtin(cls, value: str) -> str:
        if value in BUILTIN_EVENT_TYPES:
            raise ValueError(f"{value!r} is a built-in event type; its data has a fixed shape")
        return value


def _tag(value: object) -> str:
    """The union member for a frame: its type when built in, else `custom`."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) and kind in BUILTIN_EVENT_TYPES else "custom"


TypedEvent = Annotated[
    Annotated[ThreadCreatedEvent, Tag("thread_created")]
    | Annotated[ThreadForkedEvent, Tag("thread_forked")]
    | Annotated[ThreadRewoundEvent, Tag("thread_rewound")]
    | Annotated[ExecutionStartedEvent, Tag("execution_started")]
    | Annotated[TurnStartedEvent, Tag("turn_started")]
    | Annotated[StepStartedEvent, Tag("step_started")]
    | Annotated[TextDeltaEvent, Tag("text_delta")]
    | Annotated[ReasoningDeltaEvent, Tag("reasoning_delta")]
    | Annotated[OutputDeltaEvent, Tag("output_delta")]
    | Annotated[StreamRestartedEvent, Tag("stream_restarted")]
    | Annotated[ModelFallbackEvent, Tag("model_fallback")]
    | Annotated[ModelTruncatedEvent, Tag("model_truncated")]
    | Annotated[ModelRefusedEvent, Tag("model_refused")]
    | Annotated[ModelContentFilteredEvent, Tag("model_content_filtered")]
    | Annotated[ModelFinishErrorEvent, Tag("model_finish_error")]
    | Annotated[ToolCallStartedEvent, Tag("tool_call_started")]
    | Annotated[MessageCreatedEvent, Tag("message_created")]
    | Annotated[ToolResultEvent, Tag("tool_result")]
    | Annotated[ToolInvokedEvent, Tag("tool_invoked")]
    | Annotated[ToolInvokedResultEvent, Tag("tool_invoked_result")]
    | Annotated[ToolProgressEvent, Tag("tool_progress")]
    | Annotated[SubagentStartedEvent, Tag("subagent_started")]
    | Annotated[TurnEndedEvent, Tag("turn_ended")]
    | Annotated[ApprovalRequestedEvent, Tag("approval_requested")]
    | Annotated[ResultRequestedEvent, Tag("result_requested")]
    | Annotated[QuestionAskedEvent, Tag("question_asked")]
    | Annotated[ApprovalDecidedEvent, Tag("approval_decided")]
    | Annotated[ResultSubmittedEvent, Tag("result_submitted")]
    | Annotated[QuestionAnsweredEvent, Tag("question_answered")]
    | Annotated[ExecutionStoppedEvent, Tag("execution_stopped")]
    | Annotated[ExecutionFailedEvent, Tag("execution_failed")]
    | Annotated[CustomEvent, Tag("custom")],
    Discriminator(_tag),
]
"""Any event frame: a built-in event's model, chosen by `type`, or a `CustomEvent`."""

EVENTS: TypeAdapter[TypedEvent] = TypeAdapter(TypedEvent)


def parse_event(frame: Event | dict[str, Any] | str | bytes) -> TypedEvent:
    """Validate one frame into its model; raises pydantic.ValidationError on a wrong shape.
    Strict: no extra fields and no coercion (`"1"` is not a seq)."""
    if isinstance(frame, Event):
        frame = frame.model_dump_json()
    if isinstance(frame, dict):
        return EVENTS.validate_python(frame, strict=True)
    return EVENTS.validate_json(frame, strict=True)


def event_model(event_type: str) -> type[BaseModel] | None:
    """The model of a built-in type's events, None for a custom type."""
    return _BY_TYPE.get(event_type)


def check_payload(thread_id: str, event_type: str, data: object) -> None:
    """Raise ValueError when `data` is not what a `event_type` event carries (the bus's debug check)."""
    model = _BY_TYPE.get(event_type)
    if model is None:
        return  # custom: free-form
    model.model_validate({"thread_id": thread_id, "seq": 1, "at": 0.0, "type": event_type, "data": data}, strict=True)


def events_json_schema() -> dict[str, Any]:
    """The JSON schema of a frame: `oneOf` the built-in events and `CustomEvent`, with an
    OpenAPI-style `discriminator` on `type` (a type not in its mapping is a custom event)."""
    schema = EVENTS.json_schema(ref_template="#/$defs/{model}")
    schema["discriminator"] = {
        "propertyName": "type",
        "mapping": {name: f"#/$defs/{model.__name__}" for name, model in sorted(_BY_TYPE.items())},
    }
    schema["title"] = "TypedEvent"
    schema["description"] = (
        "One event as the WebSocket sends it and the event log stores it: the bus's envelope "
        "(thread_id, seq, at) and the publisher's payload (type, data)."
    )
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
