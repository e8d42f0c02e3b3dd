"""Anthropic Messages streams: LiteLLM builds the request, the runtime reads the events.

Why not `litellm.acompletion`: its stream wrapper re-shapes every Anthropic
event into an OpenAI chunk and back (about 1 ms of CPU per event), keeps only
part of what the provider said (thinking signatures, the raw stop reason,
unknown server blocks) and reports an `error` event as a 500 whatever its type.
Everything provider-specific still comes from LiteLLM, exactly as on its own
path: `get_optional_params` maps the parameters (remembered per model and parameters, see
`litellm_params`), `AnthropicConfig` builds the
headers (`validate_environment`) and the body (`transform_request`), the beta
header filter and beta-gated body fields run as in its handler, the request
goes out on LiteLLM's cached httpx client, and every failure goes through its
`exception_type`. Response formats (`response_format`, which LiteLLM turns into
a hidden tool) stay on LiteLLM's path: see `supports`.

What is ours: `stream_events` reads the SSE with httpx-sse (one `json.loads` per
event) and `AnthropicReader` turns each event into neutral stream items.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from providers import model_json
from providers.litellm_params import editable_copy, optional_params
from providers.sse_json import json_events
from providers.stream import FinishReason, ProviderBlock, ReasoningDelta, StreamItem, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    import httpx

__all__ = ["AnthropicReader", "AnthropicRequest", "build_request", "stream_events", "supports", "warm_up"]

_TRANSPORT_KEYS = ("api_key", "api_base", "api_version", "extra_headers", "timeout", "max_retries", "num_retries")
_DEFAULT_URL = "https://api.anthropic.com/v1/messages"
_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
    # A server-tool turn the API paused: the answer is incomplete and goes back as it is to continue,
    # so it is never a final answer -- the same contract as a length stop.
    "pause_turn": "length",
}
_SERVER_CALLS = frozenset({"server_tool_use", "mcp_tool_use"})


@dataclass(frozen=True, slots=True)
class AnthropicRequest:
    model: str  # the provider's model name, without LiteLLM's `anthropic/` prefix
    url: str
    headers: dict[str, str]
    content: bytes  # the body, serialised as LiteLLM serialises it
    timeout: float | None
    tool_names: dict[str, str] = field(
        default_factory=dict
    )  # name sent -> the caller's name (LiteLLM renames long ones)


def supports(kwargs: dict[str, Any]) -> bool:
    """Whether this reader can stand in for LiteLLM's: JSON mode re-shapes the answer, so it stays there."""
    return not kwargs.get("response_format")


def build_request(kwargs: dict[str, Any]) -> AnthropicRequest:
    """The HTTP request `litellm.acompletion(**kwargs)` sends, built by the same LiteLLM calls in the same order."""
    from litellm.anthropic_beta_gated_fields import strip_beta_gated_request_body
    from litellm.anthropic_beta_headers_manager import update_request_with_filtered_beta
    from litellm.litellm_core_utils.get_litellm_params import get_litellm_params
    from litellm.llms.anthropic.chat.transformation import ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY, AnthropicConfig

    params = dict(kwargs)
    model = params.pop("model").removeprefix("anthropic/")
    messages = editable_copy(params.pop("messages"))  # LiteLLM's transforms edit them in place (the system message)
    transport = {key: params.pop(key, None) for key in _TRANSPORT_KEYS}
    api_key, api_base = _endpoint(transport)
    optional = optional_params(model, "anthropic", messages, params)
    optional.pop("stream", None)
    optional = {**optional, "is_vertex_request": False}
    litellm_params = get_litellm_params(api_key=api_key, api_base=api_base, custom_llm_provider="anthropic")
    config = AnthropicConfig()
    headers = config.validate_environment(
        api_key=api_key,
        headers=dict(transport["extra_headers"] or {}),
        model=model,
        messages=messages,
        optional_params=optional,
        litellm_params=litellm_params,
        api_base=api_base,
    )
    body = config.transform_request(
        model=model, messages=messages, optional_params=optional, litellm_params=litellm_params, headers=headers
    )
    headers, body = update_request_with_filtered_beta(
        headers=headers, request_data=body, provider="anthropic", api_base=api_base
    )
    body = dict(
        strip_beta_gated_request_body(
            body, headers, drop_params=litellm_params.get("drop_params"), model=model, provider="anthropic"
        )
    )
    body["stream"] = True
    names = litellm_params.get(ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY) or {}
    return AnthropicRequest(
        model=model,
        url=api_base,
        headers=dict(headers),
        content=json.dumps(body).encode(),
        timeout=transport["timeout"],
        tool_names=dict(names),
    )


def _endpoint(transport: dict[str, Any]) -> tuple[str | None, str]:
    """The key and URL, looked up where and in the order `litellm.acompletion` looks them up."""
    import os

    import litellm
    from litellm.litellm_core_utils.url_utils import ensure_api_route
    from litellm.secret_managers.main import get_secret, get_secret_bool

    api_key = transport["api_key"] or litellm.anthropic_key or litellm.api_key or os.environ.get("ANTHROPIC_API_KEY")
    api_base = str(
        transport["api_base"]
        or litellm.api_base
        or get_secret("ANTHROPIC_API_BASE")
        or get_secret("ANTHROPIC_BASE_URL")
        or _DEFAULT_URL
    )
    if not get_secret_bool("LITELLM_ANTHROPIC_DISABLE_URL_SUFFIX"):
        api_base = ensure_api_route(api_base, "v1/messages")
    return api_key, api_base


def warm_up() -> None:
    """Import and fill now what the first request would, so a `gc.freeze()` after this covers it."""
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type  # noqa: F401
    from litellm.llms.anthropic.common_utils import anthropic_error_frame_exception  # noqa: F401

    build_request(
        {
            "model": "anthropic/claude-sonnet-4-5",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1,
            "stream": True,
            "api_key": "-",
            "api_base": "http://warm.invalid",
        }
    )


def stream_events(request: AnthropicRequest, *, max_answer_bytes: int | None = None) -> AsyncIterator[dict[str, Any]]:
    """Yield each event's data as a dict; every failure is a LiteLLM exception (see `sse_json`).

    The stream's end marker is `message_stop`. An `error` event is mapped by its type
    (`overloaded_error` is retried, `invalid_request_error` is not).
    """

    def inband(event: dict[str, Any]) -> Exception | None:
        return _error_event(request.model, event.get("error")) if event.get("type") == "error" else None

    return json_events(
        "anthropic",
        request,
        inband_error=inband,
        ends=lambda event: event.get("type") == "message_stop",
        cut="Anthropic stream ended before message_stop",
        http_error=_http_error,
        max_answer_bytes=max_answer_bytes,
    )


def _error_event(model: str, error: Any) -> Exception:
    """The exception LiteLLM raises for an HTTP answer with this error's type and message."""
    from litellm.llms.anthropic.common_utils import ANTHROPIC_ERROR_STATUS_CODE_MAP, anthropic_error_frame_exception

    error = error if isinstance(error, dict) else {"type": "api_error", "message": str(error)}
    kind = str(error.get("type") or "api_error")
    status = ANTHROPIC_ERROR_STATUS_CODE_MAP.get(kind, 500)
    return anthropic_error_frame_exception(kind, str(error.get("message") or kind), status, model)


def _http_error(status: int, text: str, headers: httpx.Headers) -> Exception:
    from litellm.llms.anthropic.common_utils import AnthropicError

    return AnthropicError(status_code=status, message=text, headers=headers)


@dataclass(slots=True)
class _Block:
    """One open content block: its start event and, for blocks kept whole, the input JSON so far."""

    kind: str
    start: dict[str, Any]
    call: int = -1  # the ToolCallDelta index of a `tool_use` block
    arguments: list[str] = field(default_factory=list)


class AnthropicReader:
    """One Messages stream, one event at a time: `feed(event)` returns the items that event completes.

    Client tool calls stream as they arrive (`tool_use` -> `ToolCallDelta`, numbered 0, 1, ... in stream order);
    thinking streams as `ReasoningDelta` (text, then its signature; a `redacted_thinking` block as its opaque
    data); every other block -- server and MCP tool calls, their results, types this reader does not know -- is
    kept whole and verbatim as one `ProviderBlock` when it closes, in stream order.
    """

    __slots__ = ("_blocks", "_calls", "_names", "finish", "finish_reason", "input_tokens", "model", "output_tokens")

    def __init__(self, tool_names: dict[str, str] | None = None) -> None:
        self._blocks: dict[int, _Block] = {}
        self._calls = 0
        self._names = tool_names or {}
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.finish: FinishReason = "stop"
        self.input_tokens = 0
        self.output_tokens = 0

    def feed(self, event: dict[str, Any]) -> list[StreamItem]:
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event.get("index", 0), event.get("delta") or {})
        if kind == "content_block_start":
            return self._start(event.get("index", 0), event.get("content_block") or {})
        if kind == "content_block_stop":
            return self._stop(event.get("index", 0))
        if kind == "message_start":
            message = event.get("message") or {}
            self.model = message.get("model") or self.model
            self._usage(message.get("usage"))
        elif kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason:
                self.finish_reason, self.finish = reason, _FINISH.get(reason, "stop")
            self._usage(event.get("usage"))
        return []  # message_stop, ping, and event types added later carry no content

    def _usage(self, usage: dict[str, Any] | None) -> None:
        """`message_start` has the input count, `message_delta` the running output count (and, lately, input again)."""
        if not usage:
            return
        if usage.get("input_tokens") is not None:
            self.input_tokens = (
                usage["input_tokens"]
                + (usage.get("cache_creation_input_tokens") or 0)
                + (usage.get("cache_read_input_tokens") or 0)
            )
        if usage.get("output_tokens") is not None:
            self.output_tokens = usage["output_tokens"]

    def _start(self, index: int, block: dict[str, Any]) -> list[StreamItem]:
        kind = block.get("type", "")
        opened = self._blocks[index] = _Block(kind, block)
        if kind == "text":
            return [TextDelta(block["text"])] if block.get("text") else []
        if kind == "tool_use":
            opened.call, self._calls = self._calls, self._calls + 1
            name = block.get("name")
            shown = self._names.get(name, name) if name is not None else None  # back to the caller's name
            return [ToolCallDelta(opened.call, block.get("id"), shown, "")]
        if kind == "thinking":
            text, signature = block.get("thinking") or "", block.get("signature") or None
            return [ReasoningDelta(text, signature=signature)] if text or signature else []
        if kind == "redacted_thinking":
            return [ReasoningDelta("", redacted=block.get("data") or "")]
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[StreamItem]:
        block = self._blocks.get(index)
        kind = delta.get("type")
        if kind == "text_delta":
            return [TextDelta(delta["text"])] if delta.get("text") else []
        if kind == "input_json_delta":
            part = delta.get("partial_json") or ""
            if block is None or not part:
                return []
            block.arguments.append(part)
            return [ToolCallDelta(block.call, None, None, part)] if block.kind == "tool_use" else []
        if kind == "thinking_delta":
            return [ReasoningDelta(delta["thinking"])] if delta.get("thinking") else []
        if kind == "signature_delta":
            return [ReasoningDelta("", signature=delta.get("signature") or "")]
        return []  # citations_delta and delta types added later: not part of the answer's text

    def _stop(self, index: int) -> list[StreamItem]:
        block = self._blocks.pop(index, None)
        if block is None or block.kind in ("text", "thinking", "redacted_thinking"):
            return []
        if block.kind == "tool_use":
            # A call without arguments streams an empty (or no) input_json_delta: it is a call with `{}`.
            return [] if block.arguments else [ToolCallDelta(block.call, None, None, "{}")]
        kept = dict(block.start)
        if block.arguments or block.kind in _SERVER_CALLS:
            kept["input"] = _input(block.arguments, block.start.get("input"))
        return [ProviderBlock(kept)]


def _input(fragments: list[str], start: Any) -> Any:
    """A server call's input: the streamed JSON when there was some, else what the start event carried."""
    if not fragments:
        return start if start is not None else {}
    text = "".join(fragments)
    try:
        return model_json.loads(text)
    except ValueError:
        return {"_raw": text}  # kept visible rather than dropped; the provider sees it verbatim on the next turn
