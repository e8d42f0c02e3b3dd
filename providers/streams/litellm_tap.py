"""What LiteLLM's stream wrapper does not say, read from the provider's own events.

On the `stream: litellm` path (and for every provider type without a reader of
its own) `litellm.acompletion` parses the stream. Its wrapper flattens things the
runtime must know:

- the end marker: it reports `finish_reason: "stop"` on every Gemini chunk and
  invents a finish when a Gemini stream is cut; it raises "Stream ended before a
  finish_reason" on an OpenAI-compatible stream that ended with `[DONE]` and
  usage but no finish_reason (Snowflake Cortex);
- in-band errors: it maps `data: {"error": {..., "status_code": 400}}` to a
  retryable mid-stream failure;
- the provider's raw stop reason, `delta.refusal`, and Anthropic content blocks it
  does not know (`mcp_tool_use` is dropped, its `mcp_tool_result` kept: a history
  the provider then refuses).

`RawTap.install` puts an observer in front of the parser of one response (an
instance attribute, never a global patch; `providers._litellm_internal.observe_*`):
LiteLLM's own iterators call `self.chunk_parser(chunk=...)` with each decoded event,
and the openai SDK's `AsyncStream` reads events through `self._iter_events()`. The
events pass on unchanged. tests/test_litellm_internals.py fails, naming the symbol,
if either moves.
"""

from __future__ import annotations

import json
from typing import Any

from providers._litellm_internal import (
    inner_stream,
    observe_chunks,
    observe_opening,
    observe_sse,
    opens_lazily,
    parses_chunks,
    reads_sse,
)
from providers.stream import ProviderBlock, RefusalDelta, StreamItem
from providers.streams.anthropic_wire import streamed_input
from providers.streams.gemini_wire import prompt_block

__all__ = ["MARKED", "RawTap"]

_OWN_BLOCKS = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})  # LiteLLM turns these into deltas
_PARSED = frozenset({"anthropic", "gemini", "openai_like"})  # read through the iterator's `chunk_parser`
MARKED = frozenset({"openai", "anthropic", "gemini"})
"""Families whose end marker the tap sees (for `openai_like` iterators LiteLLM consumes `[DONE]` itself)."""


class RawTap:
    """The raw facts of one response stream on LiteLLM's path."""

    __slots__ = (
        "_blocks",
        "_pending",
        "blocked",
        "done",
        "ended",
        "error",
        "family",
        "installed",
        "output_tokens",
        "raw_finish",
        "usage",
    )

    def __init__(self, family: str) -> None:
        self.family = (
            family  # "openai" (the openai SDK's stream), "openai_like" (LiteLLM's own iterator), "anthropic", "gemini"
        )
        self.installed = False
        self.ended = False  # the provider's own end marker arrived
        self.done = False  # OpenAI wire: `data: [DONE]` arrived
        self.raw_finish: str | None = None
        self.blocked = False  # Gemini refused the prompt: `raw_finish` is the block's reason
        self.error: dict[str, Any] | None = None
        self.usage: tuple[int, int] | None = None
        self.output_tokens: int | None = None  # Anthropic: the last message_delta's cumulative count
        self._pending: list[StreamItem] = []
        self._blocks: dict[int, tuple[dict[str, Any], list[str]]] = {}

    def install(self, wrapper: object) -> None:
        """Observe the events under LiteLLM's `CustomStreamWrapper` (its `completion_stream`, which
        some providers, Gemini among them, open lazily through `make_call` on the first read)."""
        inner = inner_stream(wrapper)
        if opens_lazily(wrapper) and self.family in _PARSED:
            observe_opening(wrapper, self._tap)
            self.installed = True  # confirmed (or withdrawn) when the stream opens
        else:
            self._tap(inner)

    def _tap(self, inner: object) -> None:
        self.installed = False
        if parses_chunks(inner) and self.family in _PARSED:
            see = {"anthropic": self._anthropic, "gemini": self._gemini}.get(self.family, self._openai_chunk)
            observe_chunks(inner, see)
            self.installed = True
        elif self.family == "openai" and reads_sse(inner):
            observe_sse(inner, self._openai)
            self.installed = True

    def drain(self) -> list[StreamItem]:
        """Items read from the raw events since the last call (refusal text, provider blocks)."""
        if not self._pending:
            return []
        items, self._pending = self._pending, []
        return items

    # -- observers -----------------------------------------------------------

    def _openai(self, data: str) -> None:
        if data.startswith("[DONE]"):
            self.done = self.ended = True
            return
        if _unremarkable(data):
            return  # most chunks: LiteLLM's own parse is all they need (a json.loads saved per chunk)
        try:
            chunk = json.loads(data)
        except ValueError:
            return
        if isinstance(chunk, dict):
            self._openai_chunk(chunk)

    def _openai_chunk(self, chunk: dict[str, Any]) -> None:
        if chunk.get("error"):
            self.error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
        usage = chunk.get("usage")
        if isinstance(usage, dict) and (usage.get("prompt_tokens") or usage.get("completion_tokens")):
            self.usage = (usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)
        for choice in chunk.get("choices") or ():
            if choice.get("finish_reason"):
                self.raw_finish, self.ended = choice["finish_reason"], True
            refusal = (choice.get("delta") or {}).get("refusal")
            if refusal:
                self._pending.append(RefusalDelta(refusal))

    def _gemini(self, chunk: dict[str, Any]) -> None:
        if chunk.get("error"):
            self.error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
        blocked = prompt_block(chunk)
        if blocked:
            self.raw_finish, self.ended, self.blocked = blocked, True, True
        for candidate in chunk.get("candidates") or ():
            if candidate.get("finishReason"):
                self.raw_finish, self.ended, self.blocked = candidate["finishReason"], True, False

    def _anthropic(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_stop":
            self.ended = True
        elif kind == "message_delta":
            # LiteLLM's wrapper stops reading at the stop reason: on its path that is the last event seen
            self.raw_finish = (event.get("delta") or {}).get("stop_reason") or self.raw_finish
            self.ended = self.ended or self.raw_finish is not None
            output = (event.get("usage") or {}).get("output_tokens")
            if isinstance(output, int):
                self.output_tokens = output  # cumulative; LiteLLM keeps message_start's count when this is 0
        elif kind == "error":
            self.error = event.get("error") if isinstance(event.get("error"), dict) else {"message": str(event)}
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") not in _OWN_BLOCKS:
                self._blocks[event.get("index", -1)] = (dict(block), [])
        elif kind == "content_block_delta" and event.get("index") in self._blocks:
            partial = (event.get("delta") or {}).get("partial_json")
            if isinstance(partial, str):
                self._blocks[event["index"]][1].append(partial)
        elif kind == "content_block_stop" and event.get("index") in self._blocks:
            block, parts = self._blocks.pop(event["index"])
            if parts:
                block["input"] = streamed_input(parts)
            self._pending.append(ProviderBlock(block))


def _unremarkable(data: str) -> bool:
    """A chunk with nothing for the tap: no finish reason, refusal, usage or error (a quick look at
    the text; anything unsure is parsed)."""
    return (
        ('"finish_reason":null' in data or '"finish_reason": null' in data)
        and '"refusal":"' not in data
        and '"refusal": "' not in data
        and ('"usage"' not in data or '"usage":null' in data or '"usage": null' in data)
        and '"error"' not in data
    )
