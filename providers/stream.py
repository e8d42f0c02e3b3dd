"""What a model stream yields, provider-neutral.

`providers.client.ModelClient.stream()` turns LiteLLM's chunks into these small
values so the executor never touches LiteLLM types. A `StreamRestart` means a
retry or fallback began after items were already yielded: the consumer must
discard everything it assembled from this stream so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ToolCallDelta:
    """A fragment of one tool call. `id`/`name` come on a call's first fragment only."""

    index: int
    id: str | None
    name: str | None
    arguments: str


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
    finish_reason: str | None
    model: str  # the LiteLLM model string that answered
    provider: str  # the provider name from the config
    usage: StreamUsage = field(default_factory=StreamUsage)
    attempts: int = 1


StreamItem = TextDelta | ToolCallDelta | ProviderBlock | StreamRestart | StreamEnd


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

    def __init__(self, message: str, *, provider: str | None = None, status: int | None = None, retryable: bool = False, kind: str = "error"):
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.kind = kind
