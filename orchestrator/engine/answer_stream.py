"""Reading one model answer as it streams: the request sent, text and reasoning deltas published as they
come, `tool_call_started` fired as each progress argument closes, a retried stream's partial answer
forgotten, and the message assembled at the end (`answers.answer_message`).

The execution's `answer` is the only caller (a side's step and a prompt called as a tool alike). These
are functions of the execution (`StreamHost`), not an object of their own: a conversation waiting for
its model holds nothing more than the execution it already is.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, cast

from orchestrator.core import tracing
from orchestrator.core.event_payloads import DeltaName, OutputDeltaPayload, Publish
from orchestrator.core.messages import ExecutionSnapshot, Message, SideName, ThreadRecord
from orchestrator.definitions.define import PromptDefinition
from orchestrator.engine import typed_output
from orchestrator.engine.answers import answer_message, with_unique_call_ids
from orchestrator.engine.dispatch import Aborted
from orchestrator.engine.hooks import ToolCallStart
from orchestrator.engine.streaming import CallStarted, StreamAssembler
from providers.request import ChatMessage, RequestExtras
from providers.stream import ModelInfo, ReasoningDelta, StreamEnd, StreamRestart, TextDelta

if TYPE_CHECKING:
    from orchestrator.definitions.thread_state import ExecutionState
    from orchestrator.engine.services import Services
    from orchestrator.engine.state import ThreadState
    from orchestrator.engine.toolset import Toolset

__all__ = ["StreamHost", "read"]

_Fired = dict[tuple[int, str], str | None]  # (index, name) -> the progress value fired for that call


class StreamHost(Protocol):
    """The execution an answer streams in (`executor._Execution` is the one)."""

    @property
    def services(self) -> Services: ...

    @property
    def thread(self) -> ThreadRecord: ...

    @property
    def state(self) -> ThreadState: ...

    @property
    def execution(self) -> ExecutionState: ...

    @property
    def snapshot(self) -> ExecutionSnapshot: ...

    @property
    def publish(self) -> Publish: ...

    def model_alias(self, prompt: PromptDefinition) -> str | None:
        """The model alias the prompt's request goes to."""


@tracing.chat
async def read(
    run: StreamHost,
    side: SideName,
    prompt: PromptDefinition,
    info: ModelInfo,
    toolset: Toolset,
    messages: list[dict[str, Any]],
    depth: int,
) -> tuple[Message, StreamEnd]:
    """Stream one response; tool_call_started fires as progress arguments close. While it reads, the
    abort signal cancels this task (no extra task per step)."""
    signal = run.execution.abort_signal
    if signal.aborted:
        raise Aborted(signal.reason or "aborted")
    task = asyncio.current_task()
    assert task is not None
    cancel = task.cancel
    signal.on_abort(cancel)
    try:
        last, assembler = await _consume(run, side, prompt, toolset, messages, depth)
    except asyncio.CancelledError:
        if signal.aborted and task.uncancel() == 0:  # type: ignore[unreachable]  # aborted while awaiting
            raise Aborted(signal.reason or "aborted") from None
        raise
    finally:
        signal.remove(cancel)
    message, ending = answer_message(
        assembler,
        last,
        thread_id=run.thread.id,
        side=side,
        depth=depth,
        flow_id=run.snapshot.flow_id,
        model=last.model if last else info.model,
        provider_tools=toolset.provider_tools,
    )
    if ending is not None:
        ending.announce(run.publish)
    message = with_unique_call_ids(message, run.execution.message_history)
    return message, last or StreamEnd(finish_reason=None, model=info.model, provider=info.provider)


async def _consume(
    run: StreamHost,
    side: SideName,
    prompt: PromptDefinition,
    toolset: Toolset,
    messages: list[dict[str, Any]],
    depth: int,
) -> tuple[StreamEnd | None, StreamAssembler]:
    """Read the model's stream: its end, if it came, and the answer assembled. The assembler is made at the
    first item: a conversation waiting for its request holds no cells, closures or lists of it."""
    end: StreamEnd | None = None
    assembler: StreamAssembler | None = None
    fired: _Fired = {}
    outputs = typed_output.OutputDeltas(partial(_output_delta, run), side, depth) if prompt.output_spec else None
    stream = run.services.client.stream(
        run.model_alias(prompt),
        cast("list[ChatMessage]", messages),  # views.side_view builds them in that shape
        tools=toolset.tools or None,
        extra=cast("RequestExtras", toolset.extra) or None,
        on_event=run.publish,  # the client's events (a fallback to the next model) are the thread's, as they are
    )
    async for item in stream:
        if isinstance(item, StreamRestart):
            assembler = None  # what the failed attempt said is forgotten
            outputs = outputs.restarted() if outputs else None
            tracing.add_event("retry", attempt=item.attempt, reason=item.reason, model=item.model)
            run.publish("stream_restarted", {"side": side, "attempt": item.attempt, "reason": item.reason})
        elif isinstance(item, StreamEnd):
            end = end or item
        else:
            if isinstance(item, TextDelta):
                _delta(run, "text_delta", side, depth, item.text)
                if outputs is not None:
                    outputs.feed(item.text)
            elif isinstance(item, ReasoningDelta) and item.text:
                _delta(run, "reasoning_delta", side, depth, item.text)
            assembler = assembler or StreamAssembler(toolset.progress_argument)
            for call in assembler.feed(item):
                await _fire_started(run, call, toolset, side, depth, fired)
    assembler = assembler or StreamAssembler(toolset.progress_argument)
    for call in assembler.finish():
        await _fire_started(run, call, toolset, side, depth, fired)
    return end, assembler


async def _fire_started(
    run: StreamHost, call: CallStarted, toolset: Toolset, side: SideName, depth: int, fired: _Fired
) -> None:
    key = (call.index, call.name)  # not the value: hashing a 1 MB value would cost a millisecond
    if key in fired and fired[key] == call.progress_value:  # the same call again after a retried stream
        return
    fired[key] = call.progress_value
    progress_argument = toolset.progress_argument(call.name)
    start = ToolCallStart(
        id=call.id,
        name=call.name,
        index=call.index,
        side=side,
        depth=depth,
        progress_argument=progress_argument,
        progress_value=call.progress_value,
    )
    await run.services.hooks.call("tool_call_started", run.state, start)
    run.publish(
        "tool_call_started",
        {
            "id": call.id,
            "name": call.name,
            "index": call.index,
            "progress_argument": progress_argument,
            "progress_value": call.progress_value,
            "side": side,
            "depth": depth,
        },
    )
    await asyncio.sleep(0)  # let subscribers see it now, not when the rest of the call has streamed


def _delta(run: StreamHost, kind: DeltaName, side: SideName, depth: int, text: str) -> None:
    run.services.bus.publish_delta(
        run.thread.id, kind, {"side": side, "depth": depth, "text": text}, lease=run.execution.lease_token
    )


def _output_delta(run: StreamHost, data: OutputDeltaPayload) -> None:
    """Where a typed answer's partial objects go: the thread's delta channel, under the execution's lease."""
    run.services.bus.publish_delta(run.thread.id, "output_delta", data, lease=run.execution.lease_token)
