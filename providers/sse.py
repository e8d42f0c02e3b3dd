"""The exact streaming bytes each provider sends, built from text and tool calls.

Tests and the scripted model serve these over respx so the real parsers run.
Each builder returns a list of SSE events (one `bytes` each) so a fault can cut
the stream between events. Formats follow the providers' API references:

- OpenAI Chat Completions: `data: {chat.completion.chunk}` lines, a last chunk
  with empty `choices` and `usage` (when `stream_options.include_usage`), then
  `data: [DONE]`.
- Anthropic Messages: named events `message_start`, `content_block_start`,
  `content_block_delta` (`text_delta` / `input_json_delta`), `content_block_stop`,
  `message_delta` (stop_reason + usage), `message_stop`.
- Gemini `streamGenerateContent?alt=sse`: `data: {GenerateContentResponse}`; a
  function call arrives whole in one part; the last frame carries `finishReason`
  and `usageMetadata`; no `[DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SSECall", "anthropic_events", "gemini_events", "openai_events", "sse_event"]


@dataclass(frozen=True, slots=True)
class SSECall:
    """One tool call to stream; `arguments` is raw JSON text (possibly invalid, for tests)."""

    name: str
    arguments: str
    id: str


def sse_event(data: dict[str, Any] | str, event: str | None = None, newline: str = "\n") -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}{newline}" if event else ""
    return f"{head}data: {payload}{newline}{newline}".encode()


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- OpenAI ------------------------------------------------------------------


def openai_events(
    text: str,
    calls: Sequence[SSECall],
    *,
    model: str,
    usage: tuple[int, int],
    chunk_size: int = 8,
    response_id: str = "chatcmpl-scripted",
) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse_event(
            {
                "id": response_id,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "system_fingerprint": None,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
        )

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in _pieces(text, chunk_size)]
    for index, call in enumerate(calls):
        first = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        events.append(chunk({"tool_calls": [first]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            for part in _pieces(call.arguments, chunk_size)
        ]
    events.append(chunk({}, "tool_calls" if calls else "stop"))
    prompt, completion = usage
    events.append(
        sse_event(
            {
                "id": response_id,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )
    )
    events.append(sse_event("[DONE]"))
    return events


# -- Anthropic ---------------------------------------------------------------


def anthropic_events(
    text: str,
    calls: Sequence[SSECall],
    *,
    model: str,
    usage: tuple[int, int],
    chunk_size: int = 8,
    message_id: str = "msg_scripted",
) -> list[bytes]:
    prompt, completion = usage
    events = [
        sse_event(
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": model,
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt, "output_tokens": 1},
                },
            },
            "message_start",
        ),
        sse_event({"type": "ping"}, "ping"),
    ]
    index = 0
    if text:
        events += _anthropic_block(
            index, {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in _pieces(text, chunk_size)]
        )
        index += 1
    for call in calls:
        start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(call.arguments, chunk_size)]
        events += _anthropic_block(index, start, deltas)
        index += 1
    events.append(
        sse_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
            "message_delta",
        )
    )
    events.append(sse_event({"type": "message_stop"}, "message_stop"))
    return events


def _anthropic_block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> list[bytes]:
    out = [sse_event({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start")]
    out += [
        sse_event({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta") for d in deltas
    ]
    out.append(sse_event({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return out


# -- Gemini ------------------------------------------------------------------


def gemini_events(
    text: str, calls: Sequence[SSECall], *, model: str, usage: tuple[int, int], chunk_size: int = 8
) -> list[bytes]:
    prompt, completion = usage
    frames: list[dict[str, Any]] = [{"text": piece} for piece in _pieces(text, chunk_size)]
    frames += [{"functionCall": {"name": call.name, "args": _json_or_raw(call.arguments)}} for call in calls]
    if not frames:
        frames = [{"text": ""}]
    events = []
    for i, part in enumerate(frames):
        candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        body: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
        if i == len(frames) - 1:
            candidate["finishReason"] = "STOP"
            body["usageMetadata"] = {
                "promptTokenCount": prompt,
                "candidatesTokenCount": completion,
                "totalTokenCount": prompt + completion,
            }
        events.append(sse_event(body, newline="\r\n"))
    return events


def _json_or_raw(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return {"_raw": arguments}  # Gemini always sends an object; keep invalid input visible
