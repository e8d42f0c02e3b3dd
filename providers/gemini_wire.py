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

What is ours: `stream_events` reads the SSE (one `json.loads` per chunk) and
`GeminiReader` turns each chunk into neutral stream items. Only Google AI Studio
(`type: gemini`) is read here; Vertex AI stays on LiteLLM's path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from providers.litellm_params import editable_copy, optional_params
from providers.sse_json import json_events
from providers.stream import FinishReason, ProviderBlock, ReasoningDelta, StreamItem, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    import httpx

__all__ = ["GeminiReader", "GeminiRequest", "build_request", "stream_events", "supports", "warm_up"]

_TRANSPORT_KEYS = ("api_key", "api_base", "api_version", "extra_headers", "timeout", "max_retries", "num_retries")
_FILTERED = ("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE")
_SIGNATURE_KEYS = frozenset({"thoughtSignature", "thought_signature"})
_FINISH: dict[str, FinishReason] = {
    "STOP": "stop",
    "FINISH_REASON_UNSPECIFIED": "stop",
    "MAX_TOKENS": "length",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "OTHER": "error",
    **{reason: "content_filter" for reason in _FILTERED},
}


@dataclass(frozen=True, slots=True)
class GeminiRequest:
    model: str  # the provider's model name, without LiteLLM's `gemini/` prefix
    url: str
    headers: dict[str, str]
    content: bytes  # the body, serialised as LiteLLM serialises it
    timeout: float | None


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


async def build_request(kwargs: dict[str, Any]) -> GeminiRequest:
    """The HTTP request `litellm.acompletion(**kwargs)` sends, built by the same LiteLLM calls in the same order."""
    import litellm
    from litellm.litellm_core_utils.get_litellm_params import get_litellm_params
    from litellm.llms.gemini.common_utils import get_api_key_from_env
    from litellm.llms.vertex_ai.gemini.transformation import async_transform_request_body
    from litellm.llms.vertex_ai.gemini.vertex_and_google_ai_studio_gemini import VertexGeminiConfig, VertexLLM
    from litellm.secret_managers.main import get_secret

    params = dict(kwargs)
    model = params.pop("model").removeprefix("gemini/")
    messages = editable_copy(params.pop("messages"))  # LiteLLM's transforms edit them in place (the system message)
    transport = {key: params.pop(key, None) for key in _TRANSPORT_KEYS}
    api_key = transport["api_key"] or get_api_key_from_env() or get_secret("PALM_API_KEY") or litellm.api_key
    api_base = transport["api_base"] or litellm.api_base or get_secret("GEMINI_API_BASE")
    optional = optional_params(model, "gemini", messages, params)
    optional.pop("stream", None)
    litellm_params = get_litellm_params(api_key=api_key, api_base=api_base, custom_llm_provider="gemini")
    extra_headers = transport["extra_headers"]
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
    return GeminiRequest(
        model=model, url=url, headers=dict(headers), content=json.dumps(body).encode(), timeout=transport["timeout"]
    )


def warm_up() -> None:
    """Import now what the first request would, so a `gc.freeze()` after this covers it."""
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type  # noqa: F401
    from litellm.llms.vertex_ai.common_utils import VertexAIError  # noqa: F401
    from litellm.llms.vertex_ai.gemini.transformation import async_transform_request_body  # noqa: F401
    from litellm.llms.vertex_ai.gemini.vertex_and_google_ai_studio_gemini import (  # noqa: F401
        VertexGeminiConfig,
        VertexLLM,
    )


def stream_events(request: GeminiRequest, *, max_answer_bytes: int | None = None) -> AsyncIterator[dict[str, Any]]:
    """Yield each `GenerateContentResponse` chunk as a dict; every failure is a LiteLLM exception (see `sse_json`).

    The end marker is a candidate with a `finishReason` (or a prompt blocked by `promptFeedback.blockReason`).
    A chunk carrying `error` is raised as the status it names.
    """
    return json_events(
        "gemini",
        request,
        inband_error=lambda chunk: _error_chunk(chunk["error"]) if "error" in chunk else None,
        ends=_ends,
        cut="Gemini stream ended before a finishReason",
        http_error=_http_error,
        max_answer_bytes=max_answer_bytes,
    )


def _ends(chunk: dict[str, Any]) -> bool:
    candidates = chunk.get("candidates")
    if candidates and candidates[0].get("finishReason"):
        return True
    return bool((chunk.get("promptFeedback") or {}).get("blockReason"))


def _error_chunk(error: Any) -> Exception:
    """What LiteLLM raises for `data: {"error": {...}}` (e.g. 429 RESOURCE_EXHAUSTED mid-stream)."""
    from litellm.llms.vertex_ai.common_utils import VertexAIError

    if not isinstance(error, dict):
        return VertexAIError(status_code=500, message=f"Unexpected error format in mid-stream chunk: {error}")
    try:
        status = int(error.get("code") or 500)
    except (TypeError, ValueError):
        status = 500
    return VertexAIError(
        status_code=status, message=f"{error.get('status', 'UNKNOWN')} - {error.get('message', 'Unknown error')}"
    )


def _http_error(status: int, text: str, headers: httpx.Headers) -> Exception:
    from litellm.llms.vertex_ai.common_utils import VertexAIError

    return VertexAIError(status_code=status, message=text, headers=headers)


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

    __slots__ = ("_calls", "_response", "finish", "finish_reason", "input_tokens", "model", "output_tokens")

    def __init__(self) -> None:
        self._calls = 0
        self._response: str | None = None
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.finish: FinishReason = "stop"
        self.input_tokens = 0
        self.output_tokens = 0

    def feed(self, chunk: dict[str, Any]) -> list[StreamItem]:
        self.model = chunk.get("modelVersion") or self.model
        self._response = self._response or chunk.get("responseId")
        usage = chunk.get("usageMetadata")
        if usage:
            self.input_tokens = usage.get("promptTokenCount") or self.input_tokens
            output = (usage.get("candidatesTokenCount") or 0) + (usage.get("thoughtsTokenCount") or 0)
            self.output_tokens = output or self.output_tokens
        blocked = (chunk.get("promptFeedback") or {}).get("blockReason")
        if blocked:
            self.finish_reason, self.finish = blocked, "content_filter"
        candidates = chunk.get("candidates")
        if not candidates:
            return []
        candidate = candidates[0]
        items = self._parts((candidate.get("content") or {}).get("parts") or ())
        reason = candidate.get("finishReason")
        if reason:
            self.finish_reason = reason
            finish = _FINISH.get(reason, "error")
            self.finish = "tool_calls" if finish == "stop" and self._calls else finish
        return items

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
        number, self._calls = self._calls, self._calls + 1
        arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
        call_id = call.get("id") or _call_id(self._response, number, call.get("name"), arguments)
        return ToolCallDelta(number, call_id, call.get("name"), arguments, signature=signature)


def _call_id(response: str | None, number: int, name: Any, arguments: str) -> str:
    """Stable across replays of the same bytes, distinct across the turns of a thread."""
    digest = hashlib.sha256(f"{response}\0{number}\0{name}\0{arguments}".encode()).hexdigest()[:24]
    return f"call_{digest}"
