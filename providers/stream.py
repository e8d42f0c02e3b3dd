"""What a model stream yields, provider-neutral.

`providers.client.ModelClient.stream()` turns LiteLLM's chunks into these small
values so the executor never touches LiteLLM types. A `StreamRestart` means a
retry or fallback began after items were already yielded: the consumer must
discard everything it assembled from this stream so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "refusal", "error"]
"""How an answer ended, the same word for every provider; `StreamEnd.finish_reason` keeps the provider's own."""


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ReasoningDelta:
    """Model reasoning: OpenAI-compatible `reasoning_content`, Anthropic thinking, Gemini thought parts.

    Stored on the message, shown to neither the other side nor the person, and sent back to the same
    provider where it requires it. `signature` is Anthropic's `signature_delta` or Gemini's
    `thoughtSignature`; `redacted` is the opaque data of an Anthropic `redacted_thinking` block.
    """

    text: str
    signature: str | None = None
    redacted: str | None = None


@dataclass(slots=True)
class RefusalDelta:
    """A fragment of a refusal (OpenAI `delta.refusal`), kept apart from the answer's text."""

    text: str


@dataclass(slots=True)
class ToolCallDelta:
    """A fragment of one tool call. `id`/`name` come on a call's first fragment only.

    `id` is the provider's own call id, never rewritten; `signature` carries what the provider
    needs back with the call on the next turn (a Gemini `thoughtSignature`), kept apart from the id.
    """

    index: int
    id: str | None
    name: str | None
    arguments: str
    signature: str | None = None


@dataclass(slots=True)
class ProviderBlock:
    """A provider-executed tool block (e.g. Anthropic `server_tool_use` or
    `web_search_tool_result`), kept verbatim for the history."""

    block: dict[str, Any]


@dataclass(slots=True)
class StreamRestart:
    attempt: int
    reason: str
    model: str | None = None  # the model the next attempt uses (differs on fallback)


@dataclass(slots=True)
class StreamUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


@dataclass(slots=True)
class StreamEnd:
    """The provider's own end marker arrived. A stream that ends without one is cut: an error, never this."""

    finish_reason: str | None  # the provider's raw value ("end_turn", "MAX_TOKENS", "stop", ...)
    model: str  # the LiteLLM model string that answered
    provider: str  # the provider name from the config
    usage: StreamUsage = field(default_factory=StreamUsage)
    attempts: int = 1
    finish: FinishReason = "stop"  # normalized: see `FinishReason`


StreamItem = TextDelta | ReasoningDelta | RefusalDelta | ToolCallDelta | ProviderBlock | StreamRestart | StreamEnd


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the executor needs to know about a model alias before calling it."""

    alias: str
    provider: str  # provider name in the config, e.g. "openai"
    provider_type: str  # LiteLLM provider family: openai, anthropic, gemini, ...
    model: str  # LiteLLM model string, e.g. "openai/gpt-4o-mini"
    dialect: str  # schema dialect: "openai" | "anthropic" | "gemini"
    supports_images: bool = False
    supports_tools: bool = True


class ProviderError(Exception):
    """A model call failed for good (after retries and fallbacks).

    `retryable` says whether trying the same request later might work;
    `status` is the HTTP status when there was one. Messages never contain keys.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status: int | None = None,
        retryable: bool = False,
        kind: str = "error",
    ):
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.kind = kind
