"""Reading one model response stream: one shape for every provider and path.

A response is read in two parts. The transport yields the provider's raw events: for the
OpenAI wire, Anthropic and Gemini that is `sse_json.json_events` (the request LiteLLM built,
sent on LiteLLM's client, one JSON event per SSE message, the wire's own end marker); on
LiteLLM's stream path it is `litellm.acompletion`'s stream (`litellm_stream.LiteLLMChunks`).
A `StreamReader` turns each raw event into the neutral items of `providers.stream` and, once
the events stop, says how the answer ended (`ReadEnd`). The client's one loop
(`providers.client`) runs every path the same way: deadline, size cap, text cleaning, retries.

    openai_wire.OpenAIReader         chat.completion.chunk dicts (`type: openai`, scripted, offline)
    anthropic_wire.AnthropicReader   Messages events (`type: anthropic`)
    gemini_wire.GeminiReader         GenerateContentResponse chunks (`type: gemini`)
    litellm_stream.LiteLLMReader     LiteLLM's chunks, plus what its tap saw (every other provider,
                                     and `stream: litellm`)

Every reader numbers tool calls through `call_ids.CallIndex` and asks `providers.finish.finish_for`
for the neutral finish, so a stream means the same whichever path read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from providers.stream import FinishReason, StreamItem

__all__ = ["ReadEnd", "StreamReader"]

Raw = TypeVar("Raw", contravariant=True)


@dataclass(slots=True)
class ReadEnd:
    """How one response ended, as its reader saw it (the client adds cost, provider and attempts)."""

    finish_reason: str | None  # the provider's own word ("end_turn", "MAX_TOKENS", "stop", ...)
    finish: FinishReason  # the neutral word (`providers.finish`)
    model: str | None  # the model the provider says answered, as it names it (None: it did not say)
    input_tokens: int = 0
    output_tokens: int = 0
    reported_cost: float | None = None  # a cost the provider reported itself (OpenRouter's `usage.cost`)
    tail: list[StreamItem] = field(default_factory=list)  # items seen after the last raw event (LiteLLM's tap)


class StreamReader(Protocol[Raw]):
    """One response stream's reader: `feed` each raw event, then `end` once the events stop.

    `feed` returns the items that event completes (tool calls already numbered by call). `end`
    raises when what was read is no answer (an in-band error, a missing end marker); a reader
    is used for one response only."""

    def feed(self, raw: Raw) -> list[StreamItem]: ...

    def end(self) -> ReadEnd: ...
