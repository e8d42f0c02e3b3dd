"""What a model request takes: the seam between the runtime and `ModelClient.stream`.

The executor hands over messages in the OpenAI chat format LiteLLM takes (whatever the provider:
LiteLLM and the runtime's readers translate), the tools in the provider's own form, a few extra
request parameters a provider tool needs, and a callback for what the client has to say while it
works (a fallback). Values below a message's fixed keys are the provider's JSON (content parts,
thinking blocks, provider fields): typed as JSON, kept as the provider gave them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NotRequired, Required, TypeAlias, TypedDict

__all__ = ["JSON", "ChatMessage", "FallbackEvent", "FunctionCall", "MessageToolCall", "ModelEvents", "RequestExtras"]

JSON: TypeAlias = "str | int | float | bool | None | Sequence[JSON] | Mapping[str, JSON]"
"""A JSON value, as a provider sends or takes it."""


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text


class MessageToolCall(TypedDict):
    """A tool call of an assistant message, as sent back to the provider."""

    id: str
    type: Literal["function"]
    function: FunctionCall
    provider_specific_fields: NotRequired[Mapping[str, JSON]]  # a Gemini thought signature, in LiteLLM's spelling


class ChatMessage(TypedDict, total=False):
    """One message of a request (OpenAI chat format, as LiteLLM takes it for every provider)."""

    role: Required[Literal["system", "user", "assistant", "tool"]]
    content: Required[str | Sequence[Mapping[str, JSON]] | None]  # text, or content parts (text, images)
    name: str
    tool_calls: Sequence[MessageToolCall]
    tool_call_id: str | None
    thinking_blocks: Sequence[Mapping[str, JSON]]  # Anthropic thinking, signed, back to the same provider
    provider_specific_fields: Mapping[str, JSON]  # provider-run tool blocks, replayed as LiteLLM expects


class RequestExtras(TypedDict, total=False):
    """Request parameters a provider-executed tool or a typed answer adds (`orchestrator.engine.toolset`)."""

    web_search_options: Mapping[str, JSON]  # OpenAI's web search
    response_format: Mapping[str, JSON]  # a typed answer's schema (orchestrator/definitions/output.py)


FallbackEvent = TypedDict("FallbackEvent", {"from": str, "to": str, "error": str})
"""A model failed for good and the next alias of its fallback chain answers (`from`, `to`: aliases)."""

ModelEvents = Callable[[Literal["model_fallback"], FallbackEvent], None]
"""What `ModelClient.stream` says while it works, as (event type, data): today only `model_fallback`."""
