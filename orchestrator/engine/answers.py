"""What a model answer becomes once its stream ended: the stored message and the events.

The stream's end (`providers.stream.StreamEnd.finish`) decides:

- `length` (cut by the token limit): the text is kept, marked `finish="length"`,
  and a `model_truncated` event says so. Tool calls in a truncated answer are never
  run: their arguments may be cut mid-JSON and a half-formed call could do harm.
  They are left off the stored message's `tool_calls` (so the model is not shown a
  call it never got an answer to, and no tool result is expected) and kept for the
  caller in `metadata["dropped_tool_calls"]`, named in the event. The next turn the
  model sees its own truncated text only.
- `refusal`: the refusal text goes to `Message.refusal`, never `content`; a
  `model_refused` event carries it.
- `content_filter`: the provider stopped the answer; `model_content_filtered`.
- `error` (e.g. Gemini `MALFORMED_FUNCTION_CALL`): `model_finish_error`.

Reasoning is stored in `Message.reasoning`, each block tagged with the provider
family that made it, so it is sent back to that family only (`views.side_view`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.core.event_payloads import AnswerEndName, AnswerEndPayload, Publish
from orchestrator.core.messages import Message, SideName
from orchestrator.engine.streaming import StreamAssembler
from providers.stream import StreamEnd

__all__ = ["AnswerEnding", "answer_message", "provider_family", "with_unique_call_ids"]

_EVENTS: dict[str, AnswerEndName | Literal["model_refused"]] = {
    "length": "model_truncated",
    "refusal": "model_refused",
    "content_filter": "model_content_filtered",
    "error": "model_finish_error",
}


@dataclass(frozen=True, slots=True)
class AnswerEnding:
    """How an answer ended when it did not simply stop, as its event says it."""

    kind: AnswerEndName | Literal["model_refused"]
    data: AnswerEndPayload
    refusal: str | None = None

    def announce(self, publish: Publish) -> None:
        if self.kind == "model_refused":
            publish("model_refused", {**self.data, "refusal": self.refusal})
        else:
            publish(self.kind, self.data)


def provider_family(model: str) -> str:
    """LiteLLM's provider family of a model string (`anthropic/claude-...` -> `anthropic`)."""
    return model.split("/", 1)[0] if "/" in model else model


def answer_message(
    assembler: StreamAssembler,
    end: StreamEnd | None,
    *,
    thread_id: str,
    side: SideName,
    depth: int,
    flow_id: str,
    model: str,
    provider_tools: Any,
) -> tuple[Message, AnswerEnding | None]:
    """The assistant message to store, and how it ended when its ending calls for an event."""
    finish = end.finish if end is not None else None
    calls = [
        c.model_copy(update={"provider_executed": c.name in provider_tools or c.id.startswith("srvtoolu_")})
        for c in assembler.tool_calls()
    ]
    family = provider_family(model)
    reasoning = [{**block, "provider": family} for block in assembler.reasoning] or None
    metadata: dict[str, Any] = {"model": model}
    dropped = [c for c in calls if not c.provider_executed] if finish == "length" else []
    if dropped:
        calls = [c for c in calls if c.provider_executed]
        metadata["dropped_tool_calls"] = [c.model_dump() for c in dropped]
    message = Message(
        thread_id=thread_id,
        side=side,
        role="assistant",
        content=assembler.text or None,
        tool_calls=calls or None,
        provider_blocks=assembler.provider_blocks or None,
        reasoning=reasoning,
        refusal=assembler.refusal,
        finish=finish,
        depth=depth,
        flow_id=flow_id,
        metadata=metadata,
    )
    kind = _EVENTS.get(finish or "")
    if kind is None and message.refusal:
        kind = "model_refused"  # a refusal with a plain stop (some servers)
    if kind is None:
        return message, None
    data: AnswerEndPayload = {
        "side": side,
        "depth": depth,
        "message_id": message.id,
        "finish": finish,
        "finish_reason": end.finish_reason if end is not None else None,
    }
    if dropped:
        data["dropped_tool_calls"] = [c.name for c in dropped]
    return message, AnswerEnding(kind, data, message.refusal)


def with_unique_call_ids(message: Message, history: list[Message]) -> Message:
    """A call id names one call within a thread: results, resume and idempotency keys go by it.

    Some servers number calls per response (`call_0` in every step), and a model
    replayed in a fresh process starts its numbering again; such a reused id gets
    the step's position as a suffix before the message is stored.
    """
    if not message.tool_calls:
        return message
    seen = {call.id for m in history for call in m.tool_calls or []}
    if not any(call.id in seen for call in message.tool_calls):
        return message
    suffix = f"_{len(history)}"
    calls = [c.model_copy(update={"id": c.id + suffix}) if c.id in seen else c for c in message.tool_calls]
    return message.model_copy(update={"tool_calls": calls})
