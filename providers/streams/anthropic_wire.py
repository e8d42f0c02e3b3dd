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

What is ours: `sse_json.json_events` reads the SSE with httpx-sse (one `json.loads`
per event; `ANTHROPIC` says what its end marker and errors look like) and
`AnthropicReader` turns each event into neutral stream items.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from providers import model_json
from providers.finish import finish_for
from providers.stream import ProviderBlock, ReasoningDelta, StreamItem, TextDelta, ToolCallDelta
from providers.streams import ReadEnd
from providers.streams.call_ids import CallIndex
from providers.streams.litellm_params import mapped_call
from providers.streams.sse_json import Event, Transport, Wire, WireRequest

__all__ = ["ANTHROPIC", "AnthropicReader", "build_request", "streamed_input", "supports", "warm_up"]

_DEFAULT_URL = "https://api.anthropic.com/v1/messages"
_SERVER_CALLS = frozenset({"server_tool_use", "mcp_tool_use"})


def supports(kwargs: dict[str, Any]) -> bool:
    """Whether this reader can stand in for LiteLLM's: JSON mode re-shapes the answer, so it stays there."""
    return not kwargs.get("response_format")


def build_request(kwargs: dict[str, Any]) -> WireRequest:
    """The HTTP request `litellm.acompletion(**kwargs)` sends, built by the same LiteLLM calls in the same order."""
    from providers._litellm_internal import (
        ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY,
        AnthropicConfig,
        get_litellm_params,
        strip_beta_gated_request_body,
        update_request_with_filtered_beta,
    )

    call = mapped_call(kwargs, "anthropic")
    model, messages, transport = call.model, call.messages, call.transport
    api_key, api_base = _endpoint(transport)
    optional = {**call.optional, "is_vertex_request": False}
    litellm_params = get_litellm_params(api_key=api_key, api_base=api_base, custom_llm_provider="anthropic")
    config = AnthropicConfig()
    headers = config.validate_environment(
        api_key=api_key,
        headers=dict(transport.extra_headers),
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
    content = json.dumps(body).encode()
    return WireRequest(ANTHROPIC, model, api_base, dict(headers), content, transport.timeout, dict(names))


def _endpoint(transport: Transport) -> tuple[str | None, str]:
    """The key and URL, looked up where and in the order `litellm.acompletion` looks them up."""
    import os

    import litellm

    from providers._litellm_internal import ensure_api_route, get_secret, get_secret_bool

    api_key = transport.api_key or litellm.anthropic_key or litellm.api_key or os.environ.get("ANTHROPIC_API_KEY")
    api_base = str(
        transport.api_base
        or litellm.api_base
        or get_secret("ANTHROPIC_API_BASE")
        or get_secret("ANTHROPIC_BASE_URL")
        or _DEFAULT_URL
    )
    if not get_secret_bool("LITELLM_ANTHROPIC_DISABLE_URL_SUFFIX"):
        api_base = ensure_api_route(api_base, "v1/messages")
    return api_key, api_base


def warm_up() -> None:
    """Fill now what the first request would, so a `gc.freeze()` after this covers it."""
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


# -- the stream ----------------------------------------------------------------


def _error_event(event: Event, model: str) -> Exception | None:
    """An `error` event: the exception LiteLLM raises for an HTTP answer with its type and message
    (`overloaded_error` is retried, `invalid_request_error` is not)."""
    if event.get("type") != "error":
        return None
    from providers._litellm_internal import ANTHROPIC_ERROR_STATUS_CODE_MAP, anthropic_error_frame_exception

    error = event.get("error")
    error = error if isinstance(error, dict) else {"type": "api_error", "message": str(error)}
    kind = str(error.get("type") or "api_error")
    status = ANTHROPIC_ERROR_STATUS_CODE_MAP.get(kind, 500)
    return anthropic_error_frame_exception(kind, str(error.get("message") or kind), status, model)


_CUT = "Anthropic stream ended before message_stop"
ANTHROPIC = Wire(
    provider="anthropic",
    ends=lambda event: event.get("type") == "message_stop",
    inband_error=_error_event,
    http_error="AnthropicError",
    cut=_CUT,
)


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

    __slots__ = ("_blocks", "_calls", "_finish", "_input", "_model", "_names", "_output", "_started")

    def __init__(self, tool_names: Mapping[str, str] | None = None) -> None:
        self._blocks: dict[int, _Block] = {}
        self._calls = CallIndex()
        self._started = 0  # `tool_use` blocks so far: each one's number is its call's index
        self._names = tool_names or {}
        self._model: str | None = None
        self._finish: str | None = None
        self._input = self._output = 0

    def feed(self, event: Event) -> list[StreamItem]:
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event.get("index", 0), event.get("delta") or {})
        if kind == "content_block_start":
            return self._start(event.get("index", 0), event.get("content_block") or {})
        if kind == "content_block_stop":
            return self._stop(event.get("index", 0))
        if kind == "message_start":
            message = event.get("message") or {}
            self._model = message.get("model") or self._model
            self._usage(message.get("usage"))
        elif kind == "message_delta":
            self._finish = (event.get("delta") or {}).get("stop_reason") or self._finish
            self._usage(event.get("usage"))
        return []  # message_stop, ping, and event types added later carry no content

    def end(self) -> ReadEnd:
        finish = finish_for(self._finish, "anthropic", has_calls=self._calls.count > 0)
        return ReadEnd(self._finish, finish, self._model, self._input, self._output)

    def _usage(self, usage: dict[str, Any] | None) -> None:
        """`message_start` has the input count, `message_delta` the running output count (and, lately, input again)."""
        if not usage:
            return
        if usage.get("input_tokens") is not None:
            self._input = (
                usage["input_tokens"]
                + (usage.get("cache_creation_input_tokens") or 0)
                + (usage.get("cache_read_input_tokens") or 0)
            )
        if usage.get("output_tokens") is not None:
            self._output = usage["output_tokens"]

    def _start(self, index: int, block: dict[str, Any]) -> list[StreamItem]:
        kind = block.get("type", "")
        opened = self._blocks[index] = _Block(kind, block)
        if kind == "text":
            return [TextDelta(block["text"])] if block.get("text") else []
        if kind == "tool_use":
            opened.call, self._started = self._started, self._started + 1
            name = block.get("name")
            shown = self._names.get(name, name) if name is not None else None  # back to the caller's name
            return [self._fragment(opened.call, block.get("id"), shown, "")]
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
            return [self._fragment(block.call, None, None, part)] if block.kind == "tool_use" else []
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
            return [] if block.arguments else [self._fragment(block.call, None, None, "{}")]
        kept = dict(block.start)
        if block.arguments or block.kind in _SERVER_CALLS:
            kept["input"] = _input(block.arguments, block.start.get("input"))
        return [ProviderBlock(kept)]

    def _fragment(self, number: int, call_id: str | None, name: str | None, arguments: str) -> ToolCallDelta:
        """A piece of the `number`th `tool_use` block, placed by id (two blocks with one id are a corrupt stream)."""
        return self._calls.place(ToolCallDelta(number, call_id, name, arguments), number)


def _input(fragments: list[str], start: Any) -> Any:
    """A server call's input: the streamed JSON when there was some, else what the start event carried."""
    if not fragments:
        return start if start is not None else {}
    return streamed_input(fragments)


def streamed_input(fragments: list[str]) -> Any:
    """A kept block's input from its `input_json_delta` fragments (on both of Anthropic's paths)."""
    text = "".join(fragments)
    try:
        return model_json.loads(text)
    except ValueError:
        return {"_raw": text}  # kept visible rather than dropped; the provider sees it verbatim on the next turn
