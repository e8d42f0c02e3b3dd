"""Our thread events, translated into AG-UI events (the `agui` extra's `ag_ui.core` models).

An AG-UI client checks the order of what it receives: a text message's content only between its
start and its end, a tool call's arguments only while it is open, a step finished under the name it
started with, nothing after the run's end. Our events do not come in those brackets (a text delta
has no message id, a step has no end event), so `AguiTranslator` keeps the brackets open itself,
one event in, AG-UI events out, and closes whatever is open before anything that cannot sit inside
it:

    step_started      -> (close open) STEP_FINISHED of the last step, STEP_STARTED "side_a.step_3"
    text_delta        -> TEXT_MESSAGE_START once, then TEXT_MESSAGE_CONTENT
    reasoning_delta   -> REASONING_START + REASONING_MESSAGE_START once, then REASONING_MESSAGE_CONTENT
    tool_call_started -> (close text) TOOL_CALL_START
    message_created   -> (assistant) TOOL_CALL_ARGS + TOOL_CALL_END per call; its text if none streamed
    tool_result       -> TOOL_CALL_RESULT
    execution_stopped -> (close open) RUN_FINISHED, `cancelled` outcome when stopped from outside
    execution_failed  -> (close open) RUN_ERROR
    a tool's event    -> CUSTOM named as emitted (`state.emit`)
    our other events  -> CUSTOM named `orchestrator.<type>` (turns, progress, fallbacks, invoked calls)

Only the thread's own level (depth 0) streams as messages: a prompt called as a tool is the call's
business, seen as its TOOL_CALL_RESULT (and its `orchestrator.tool_invoked*` customs).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TypeAlias

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from orchestrator.core import event_types as ev
from orchestrator.core.messages import Message

__all__ = ["CUSTOM_PREFIX", "AguiTranslator"]

CUSTOM_PREFIX = "orchestrator."  # CUSTOM names of our own events; a tool's events keep the name it emitted
_Handler: TypeAlias = Callable[["AguiTranslator", ev.TypedEvent], list[BaseEvent]]


class AguiTranslator:
    """One run's translation. State: the open step, text message, reasoning message and tool calls.

    `ended` turns true on the run's last event (RUN_FINISHED or RUN_ERROR); events after it are dropped.
    """

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.ended = False
        self.pending_calls: list[str] = []  # calls started in this run with no result yet, in order
        self._ids = itertools.count(1)
        self._step: str | None = None
        self._text: str | None = None  # the open text message's id
        self._streamed = False  # text deltas came for the answer its message_created will close
        self._reasoning: str | None = None
        self._open_calls: dict[str, str] = {}  # started, arguments not sent yet: id -> name

    def translate(self, event: ev.TypedEvent) -> list[BaseEvent]:
        """The AG-UI events for one of ours, in order (often none)."""
        if self.ended:
            return []
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            return handler(self, event)
        if isinstance(event, ev.CustomEvent):
            return [CustomEvent(name=event.type, value=event.data)]
        if isinstance(event, ev.ThreadCreatedEvent | ev.ExecutionStartedEvent):
            return []  # RUN_STARTED already said it
        return [CustomEvent(name=CUSTOM_PREFIX + event.type, value=event.model_dump(mode="json")["data"])]

    def close(self) -> list[BaseEvent]:
        """Close whatever is open (the run is about to end, or something that cannot nest comes)."""
        out = self._close_messages()
        for call_id in list(self._open_calls):
            out.append(ToolCallEndEvent(tool_call_id=call_id))
        self._open_calls.clear()
        if self._step is not None:
            out.append(StepFinishedEvent(step_name=self._step))
            self._step = None
        return out

    def _close_messages(self) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if self._text is not None:
            out.append(TextMessageEndEvent(message_id=self._text))
            self._text = None
        if self._reasoning is not None:
            out += [ReasoningMessageEndEvent(message_id=self._reasoning), ReasoningEndEvent(message_id=self._reasoning)]
            self._reasoning = None
        return out

    def _new_id(self, kind: str) -> str:
        return f"{self.run_id}-{kind}-{next(self._ids)}"

    # -- handlers ---------------------------------------------------------------

    def _step_started(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.StepStartedEvent)
        out = self.close()
        self._step = f"side_{event.data.side}.step_{event.data.step}"
        return [*out, StepStartedEvent(step_name=self._step)]

    def _turn_ended(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.TurnEndedEvent)
        return [*self.close(), CustomEvent(name=CUSTOM_PREFIX + event.type, value=event.data.model_dump(mode="json"))]

    def _text_delta(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.TextDeltaEvent)
        if event.data.depth != 0 or not event.data.text:
            return []
        out: list[BaseEvent] = []
        if self._text is None:
            out = self._close_messages()
            self._text = self._new_id("text")
            out.append(TextMessageStartEvent(message_id=self._text, role="assistant", name=f"side_{event.data.side}"))
        out.append(TextMessageContentEvent(message_id=self._text, delta=event.data.text))
        self._streamed = True
        return out

    def _reasoning_delta(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.ReasoningDeltaEvent)
        if event.data.depth != 0 or not event.data.text:
            return []
        out: list[BaseEvent] = []
        if self._reasoning is None:
            out = self._close_messages()
            self._reasoning = self._new_id("reasoning")
            out += [
                ReasoningStartEvent(message_id=self._reasoning),
                ReasoningMessageStartEvent(message_id=self._reasoning, role="reasoning"),
            ]
        out.append(ReasoningMessageContentEvent(message_id=self._reasoning, delta=event.data.text))
        return out

    def _tool_call_started(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.ToolCallStartedEvent)
        data = event.data
        if data.depth != 0 or data.id in self._open_calls:
            return []
        parent = self._text
        out = self._close_messages()
        self._open_calls[data.id] = data.name
        out.append(ToolCallStartEvent(tool_call_id=data.id, tool_call_name=data.name, parent_message_id=parent))
        return out

    def _message_created(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.MessageCreatedEvent)
        message = event.data
        if message.role != "assistant" or message.depth != 0:
            return []  # the person's message came from the client; system and injected ones are ours
        streamed, self._streamed = self._streamed, False
        out = self._close_messages()
        if message.content and not streamed:  # answered without deltas (a replayed or non-streaming model)
            out += [
                TextMessageStartEvent(message_id=message.id, role="assistant", name=f"side_{message.side}"),
                TextMessageContentEvent(message_id=message.id, delta=message.content),
                TextMessageEndEvent(message_id=message.id),
            ]
        for call in message.tool_calls or []:
            if call.id not in self._open_calls:
                out.append(ToolCallStartEvent(tool_call_id=call.id, tool_call_name=call.name))
            self._open_calls.pop(call.id, None)
            out += [
                ToolCallArgsEvent(tool_call_id=call.id, delta=call.arguments),
                ToolCallEndEvent(tool_call_id=call.id),
            ]
            if not call.provider_executed:
                self.pending_calls.append(call.id)
        return out

    def _tool_result(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.ToolResultEvent)
        message: Message = event.data
        if message.depth != 0 or message.tool_call_id is None:
            return []
        if message.tool_call_id in self.pending_calls:
            self.pending_calls.remove(message.tool_call_id)
        return [
            ToolCallResultEvent(
                message_id=message.id, tool_call_id=message.tool_call_id, content=message.content or "", role="tool"
            )
        ]

    def _execution_stopped(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.ExecutionStoppedEvent)
        data = event.data
        out = self.close()
        self.ended = True
        result = {"reason": data.reason, "stopped_by": data.stopped_by, "flow_id": data.flow_id}
        if data.stopped_by == "caller":
            outcome: RunFinishedCancelledOutcome | RunFinishedSuccessOutcome = RunFinishedCancelledOutcome()
        else:
            outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=self.pending_calls or None)
        return [*out, RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, result=result, outcome=outcome)]

    def _execution_failed(self, event: ev.TypedEvent) -> list[BaseEvent]:
        assert isinstance(event, ev.ExecutionFailedEvent)
        data = event.data
        code = data.code if isinstance(data, ev.RunFailureData) else "provider_error"
        return self.fail(data.error, code)

    def fail(self, message: str, code: str) -> list[BaseEvent]:
        """End the run with RUN_ERROR (the execution failed, or the server could not follow it)."""
        if self.ended:
            return []
        out = self.close()
        self.ended = True
        return [*out, RunErrorEvent(message=message, code=code)]


_HANDLERS: dict[type, _Handler] = {
    ev.StepStartedEvent: AguiTranslator._step_started,
    ev.TurnEndedEvent: AguiTranslator._turn_ended,
    ev.TextDeltaEvent: AguiTranslator._text_delta,
    ev.ReasoningDeltaEvent: AguiTranslator._reasoning_delta,
    ev.ToolCallStartedEvent: AguiTranslator._tool_call_started,
    ev.MessageCreatedEvent: AguiTranslator._message_created,
    ev.ToolResultEvent: AguiTranslator._tool_result,
    ev.ExecutionStoppedEvent: AguiTranslator._execution_stopped,
    ev.ExecutionFailedEvent: AguiTranslator._execution_failed,
}
