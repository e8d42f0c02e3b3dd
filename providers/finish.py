"""How an answer ended, one word for every provider, and what an in-band error means.

Providers name their stop reasons differently (`end_turn`, `MAX_TOKENS`, `length`,
`SAFETY`...) and LiteLLM maps some of them on its path; the executor needs one
vocabulary (`providers.stream.FinishReason`) to decide what to run and what to
store. The provider's own word stays on `StreamEnd.finish_reason`.

An error can also arrive inside an HTTP 200 stream (`data: {"error": {...}}`:
Groq's `tool_use_failed`, OpenRouter's `code: 400`, vLLM, proxies, Anthropic's
`event: error`). It carries its own status or type; `inband_status` reads it so
it is mapped like the same status over HTTP (a 400 is not retried) on every path.
"""

from __future__ import annotations

from typing import Any

from providers.stream import FinishReason

__all__ = ["inband_status", "normalize_finish"]

_COMMON: dict[str, FinishReason] = {
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
    "pause_turn": "length",  # Anthropic paused a long turn: unfinished, like the native reader says
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    # Gemini
    "finish_reason_unspecified": "stop",
    "malformed_function_call": "error",
    "unexpected_tool_call": "error",
    "other": "error",
    "too_many_tool_calls": "error",
}
_GEMINI_FILTERS = frozenset(
    {
        "safety",
        "recitation",
        "blocklist",
        "prohibited_content",
        "spii",
        "image_safety",
        "language",
        "image_prohibited_content",
        "image_recitation",
        "image_other",
        "no_image",
    }
)

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


def normalize_finish(raw: str | None, *, has_calls: bool = False, refused: bool = False) -> FinishReason:
    """The neutral finish for a provider's raw stop reason.

    `has_calls`: Gemini says `STOP` after function calls and some OpenAI-compatible servers say
    `stop` too; a finished answer holding tool calls is a `tool_calls` finish. `refused`: the answer
    carried refusal text (OpenAI sends `delta.refusal` and then a plain `stop`).
    """
    word = (raw or "stop").lower()
    finish = _COMMON.get(word) or ("content_filter" if word in _GEMINI_FILTERS else "stop")
    if finish == "stop" and refused:
        return "refusal"
    if finish == "stop" and has_calls:
        return "tool_calls"
    return finish


def inband_status(error: Any) -> int:
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
