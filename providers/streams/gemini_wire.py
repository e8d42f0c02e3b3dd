"""Gemini `streamGenerateContent?alt=sse` streams: LiteLLM builds the request, the runtime reads the chunks.

Why not `litellm.acompletion`: its wrapper costs about 1 ms of CPU per chunk and
reports `finish_reason: "stop"` on every Gemini chunk, so a stream cut before
its last chunk looks like a finished answer. Everything provider-specific still
comes from LiteLLM, as on its own path: `get_optional_params` maps the
parameters (see `litellm_params`), `VertexLLM.get_token_and_url` makes the URL and auth header,
`VertexGeminiConfig.validate_environment` the headers and
`async_transform_request_body` the body (system instruction, tools, thought
signatures, context caching); the request goes out on LiteLLM's cached httpx
client and every failure goes through its `exception_type`.

What is ours: `sse_json.json_events` reads the SSE (one `json.loads` per chunk;
`GEMINI` says what its end marker and errors look like) and `GeminiReader` turns
each chunk into neutral stream items. Only Google AI Studio
(`type: gemini`) is read here; Vertex AI stays on LiteLLM's path.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from providers.finish import finish_for
from providers.stream import ProviderBlock, ReasoningDelta, StreamItem, TextDelta, ToolCallDelta
from providers.streams import ReadEnd
from providers.streams.call_ids import CallIndex
from providers.streams.litellm_params import mapped_call
from providers.streams.sse_json import Event, Wire, WireRequest

__all__ = ["GEMINI", "GeminiReader", "build_request", "prompt_block", "supports", "warm_up"]

_SIGNATURE_KEYS = frozenset({"thoughtSignature", "thought_signature"})


def supports(kwargs: dict[str, Any]) -> bool:
    """Whether this reader can stand in for LiteLLM's: cached contents create a cache first, so they stay there."""
    return not kwargs.get("cached_content") and not any(
        isinstance(m, dict) and _has_cache_control(m) for m in kwargs.get("messages") or ()
    )


def _has_cache_control(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return "cache_control" in message or (
        isinstance(content, list) and any(isinstance(p, dict) and "cache_control" in p for p in content)
    )


async def build_request(kwargs: dict[str, Any]) -> WireRequest:
    """The HTTP request `litellm.acompletion(**kwargs)` sends, built by the same LiteLLM calls in the same order."""
    import litellm

    from providers._litellm_internal import (
        VertexGeminiConfig,
        VertexLLM,
        async_transform_request_body,
        get_api_key_from_env,
        get_litellm_params,
        get_secret,
    )

    call = mapped_call(kwargs, "gemini")
    model, messages, transport, optional = call.model, call.messages, call.transport, call.optional
    api_key = transport.api_key or get_api_key_from_env() or get_secret("PALM_API_KEY") or litellm.api_key
    api_base = transport.api_base or litellm.api_base or get_secret("GEMINI_API_BASE")
    litellm_params = get_litellm_params(api_key=api_key, api_base=api_base, custom_llm_provider="gemini")
    extra_headers = transport.extra_headers or None  # as LiteLLM's own path passes it: None without headers
    auth, url = VertexLLM().get_token_and_url(
        model=model,
        auth_header=None,
        gemini_api_key=api_key,
        vertex_project=None,
        vertex_location=None,
        vertex_credentials=None,
        stream=True,
        custom_llm_provider="gemini",
        api_base=api_base,
    )
    headers = VertexGeminiConfig().validate_environment(
        api_key=auth,
        headers=extra_headers,
        model=model,
        messages=messages,
        optional_params=optional,
        litellm_params=litellm_params,
    )
    body = await async_transform_request_body(
        gemini_api_key=api_key,
        messages=messages,
        api_base=api_base,
        model=model,
        client=None,
        timeout=None,
        extra_headers=extra_headers,
        optional_params=optional,
        logging_obj=None,  # type: ignore[arg-type]  # used only to create a cache
        custom_llm_provider="gemini",
        litellm_params=litellm_params,
        vertex_project=None,
        vertex_location=None,
        vertex_auth_header=auth,
    )
    return WireRequest(GEMINI, model, url, dict(headers), json.dumps(body).encode(), transport.timeout)


def warm_up() -> None:
    """Import now what the first request would, so a `gc.freeze()` after this covers it."""
    import providers._litellm_internal  # noqa: F401


# -- the stream ----------------------------------------------------------------


def prompt_block(chunk: Event) -> str | None:
    """Why Gemini refused the prompt (`promptFeedback.blockReason`), if it did: the answer's end."""
    feedback = chunk.get("promptFeedback")
    return (feedback.get("blockReason") or None) if feedback else None


def _ends(chunk: Event) -> bool:
    """The end marker is a candidate with a `finishReason`, or a prompt block."""
    candidates = chunk.get("candidates")
    if candidates and candidates[0].get("finishReason"):
        return True
    return prompt_block(chunk) is not None


def _error_chunk(chunk: Event, model: str) -> Exception | None:
    """What LiteLLM raises for `data: {"error": {...}}` (e.g. 429 RESOURCE_EXHAUSTED mid-stream): its status."""
    if "error" not in chunk:
        return None
    from providers._litellm_internal import VertexAIError

    error = chunk["error"]
    if not isinstance(error, dict):
        return VertexAIError(status_code=500, message=f"Unexpected error format in mid-stream chunk: {error}")
    try:
        status = int(error.get("code") or 500)
    except (TypeError, ValueError):
        status = 500
    return VertexAIError(
        status_code=status, message=f"{error.get('status', 'UNKNOWN')} - {error.get('message', 'Unknown error')}"
    )


_CUT = "Gemini stream ended before a finishReason"
GEMINI = Wire(provider="gemini", ends=_ends, inband_error=_error_chunk, http_error="VertexAIError", cut=_CUT)


class GeminiReader:
    """One Gemini stream, one chunk at a time: `feed(chunk)` returns the items that chunk carries.

    Parts that are neither text, thought nor function call (code execution, inline data, kinds added later)
    are kept verbatim as `ProviderBlock`s. Function calls arrive whole (several may share a chunk) and become
    one `ToolCallDelta` each, numbered 0, 1, ... in stream order, with the part's `thoughtSignature` as the
    delta's `signature`. Gemini may send no call id: the reader makes one from the response id and the call's
    number, so replaying the same bytes gives the same id. Thought parts (`thought: true`) become
    `ReasoningDelta`; a signature on any other part is kept as a `ReasoningDelta` with no text, so it can go
    back with the turn.
    """

    __slots__ = ("_blocked", "_calls", "_finish", "_input", "_model", "_output", "_response")

    def __init__(self) -> None:
        self._calls = CallIndex()
        self._response: str | None = None
        self._model: str | None = None
        self._finish: str | None = None
        self._blocked = False  # the prompt was refused: `_finish` is the block's reason
        self._input = self._output = 0

    def feed(self, chunk: Event) -> list[StreamItem]:
        self._model = chunk.get("modelVersion") or self._model
        self._response = self._response or chunk.get("responseId")
        usage = chunk.get("usageMetadata")
        if usage:
            self._input = usage.get("promptTokenCount") or self._input
            output = (usage.get("candidatesTokenCount") or 0) + (usage.get("thoughtsTokenCount") or 0)
            self._output = output or self._output
        blocked = prompt_block(chunk)
        if blocked:
            self._finish, self._blocked = blocked, True
        candidates = chunk.get("candidates")
        if not candidates:
            return []
        candidate = candidates[0]
        items = self._parts((candidate.get("content") or {}).get("parts") or ())
        reason = candidate.get("finishReason")
        if reason:
            self._finish, self._blocked = reason, False
        return items

    def end(self) -> ReadEnd:
        has_calls = self._calls.count > 0
        finish = finish_for(self._finish, "gemini", has_calls=has_calls, prompt_blocked=self._blocked)
        return ReadEnd(self._finish, finish, self._model, self._input, self._output)

    def _parts(self, parts: Any) -> list[StreamItem]:
        items: list[StreamItem] = []
        for part in parts:
            signature = part.get("thoughtSignature") or part.get("thought_signature")
            call = part.get("functionCall")
            if call is not None:
                items.append(self._call(call, signature))
            elif part.get("thought"):
                items.append(ReasoningDelta(part.get("text") or "", signature=signature))
            elif "text" in part or set(part) <= _SIGNATURE_KEYS:
                if part.get("text"):
                    items.append(TextDelta(part["text"]))
                if signature:
                    items.append(ReasoningDelta("", signature=signature))
            else:  # executableCode, codeExecutionResult, inlineData, part kinds added later: kept verbatim
                items.append(ProviderBlock(dict(part)))
        return items

    def _call(self, call: dict[str, Any], signature: str | None) -> ToolCallDelta:
        number = self._calls.count  # a call arrives whole: each one is a new call
        arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
        call_id = call.get("id") or _call_id(self._response, number, call.get("name"), arguments)
        fragment = ToolCallDelta(number, call_id, call.get("name"), arguments, signature=signature)
        return self._calls.place(fragment, number)


def _call_id(response: str | None, number: int, name: Any, arguments: str) -> str:
    """Stable across replays of the same bytes, distinct across the turns of a thread."""
    digest = hashlib.sha256(f"{response}\0{number}\0{name}\0{arguments}".encode()).hexdigest()[:24]
    return f"call_{digest}"
