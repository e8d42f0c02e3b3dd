"""How an answer ended, one word for every provider and every stream path, and what an in-band error means.

Providers name their stop reasons differently (`end_turn`, `MAX_TOKENS`, `length`,
`SAFETY`...) and LiteLLM maps some of them on its path; the executor needs one
vocabulary (`providers.stream.FinishReason`) to decide what to run and what to
store. Every reader asks `finish_for` with the provider's own word (the runtime's
readers, and LiteLLM's path with the word its tap saw), so a stream means the same
whichever path read it. The provider's own word stays on `StreamEnd.finish_reason`.

An error can also arrive inside an HTTP 200 stream (`data: {"error": {...}}`:
Groq's `tool_use_failed`, OpenRouter's `code: 400`, vLLM, proxies, Anthropic's
`event: error`). It carries its own status or type; `inband_status` reads it so
it is mapped like the same status over HTTP (a 400 is not retried) on every path.
"""

from __future__ import annotations

from typing import Literal

from providers.stream import FinishReason

__all__ = ["Vocabulary", "finish_for", "inband_status"]

Vocabulary = Literal["openai", "anthropic", "gemini"]
"""Whose words a raw stop reason is in: the OpenAI wire's (also LiteLLM's mapped words), Anthropic's or Gemini's."""

_WORDS: dict[str, FinishReason] = {
    # OpenAI Chat Completions and LiteLLM's mapped values
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
    "refusal": "refusal",
    "error": "error",
    # Anthropic Messages
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",  # Gemini's MAX_TOKENS too
    "model_context_window_exceeded": "length",
    # A server-tool turn the API paused: the answer is incomplete and goes back as it is to continue,
    # so it is never a final answer -- the same contract as a length stop.
    "pause_turn": "length",
    # Gemini (compared lower-cased): what its content filters stopped...
    **dict.fromkeys(
        (
            "safety",
            "recitation",
            "blocklist",
            "prohibited_content",
            "spii",
            "language",
            "image_safety",
            "image_prohibited_content",
            "image_recitation",
            "image_other",
            "no_image",
        ),
        "content_filter",
    ),
    # ...and what went wrong on the model's side
    "finish_reason_unspecified": "stop",
    "malformed_function_call": "error",
    "unexpected_tool_call": "error",
    "too_many_tool_calls": "error",
    "other": "error",
}

_UNKNOWN: dict[Vocabulary, FinishReason] = {
    # OpenAI-compatible servers name ordinary ends in words of their own (`eos`, `end`...)
    "openai": "stop",
    "anthropic": "stop",
    # Gemini's reasons other than STOP and MAX_TOKENS all say the answer went wrong; one added later likely too
    "gemini": "error",
}

_INBAND_TYPES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "overloaded_error": 529,
    "api_error": 500,
    "server_error": 500,
    "invalid_argument": 400,
    "resource_exhausted": 429,
    "unavailable": 503,
}


def finish_for(
    raw: str | None,
    vocabulary: Vocabulary,
    *,
    has_calls: bool = False,
    refused: bool = False,
    prompt_blocked: bool = False,
) -> FinishReason:
    """The neutral finish for a provider's raw stop reason (None: the stream named none, a plain stop).

    `has_calls`: Gemini says `STOP` after function calls and some OpenAI-compatible servers say
    `stop` too; a finished answer holding tool calls is a `tool_calls` finish. `refused`: the answer
    carried refusal text (OpenAI sends `delta.refusal` and then a plain `stop`). `prompt_blocked`: Gemini
    refused the prompt (`promptFeedback.blockReason`, whose words overlap its finish reasons): a filter,
    whatever the reason says.
    """
    if prompt_blocked:
        return "content_filter"
    finish = _WORDS.get(raw.lower(), _UNKNOWN[vocabulary]) if raw else "stop"
    if finish == "stop" and refused:
        return "refusal"
    if finish == "stop" and has_calls:
        return "tool_calls"
    return finish


def inband_status(error: object) -> int:
    """The HTTP status an in-band stream error stands for: its own `status_code`, an integer
    `code` (OpenRouter), or its `type` (Groq, Anthropic); anything else is a server error (500)."""
    if not isinstance(error, dict):
        return 500
    for key in ("status_code", "status", "code"):
        value = error.get(key)
        if isinstance(value, int) and 400 <= value < 600:
            return value
        if isinstance(value, str) and value.isdigit() and 400 <= int(value) < 600:
            return int(value)
    for key in ("type", "status", "code"):
        value = error.get(key)
        if isinstance(value, str) and value.lower() in _INBAND_TYPES:
            return _INBAND_TYPES[value.lower()]
    return 500
