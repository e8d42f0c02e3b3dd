"""OpenAI Chat Completions streams: LiteLLM builds the request, the runtime reads the SSE.

Why a second path beside `litellm.acompletion`: its stream wrapper costs about
0.7-1 ms of CPU per chunk (`CustomStreamWrapper.chunk_creator` plus the openai
SDK's model construction), more than the whole rest of a step. For providers
that speak the OpenAI wire (`type: openai` and scripted models), everything
provider-specific still comes from LiteLLM:

- parameters are mapped by `get_optional_params` (so `max_tokens` becomes
  `max_completion_tokens` for reasoning models, unknown ones go to `extra_body`,
  unsupported ones raise `UnsupportedParamsError`), and the body, headers and
  URL by the provider's chat config (`transform_request`,
  `validate_environment`, `get_complete_url`);
- the HTTP client is LiteLLM's cached httpx client, one per event loop;
- every failure goes through LiteLLM's `exception_type`, so callers see the
  same `RateLimitError`, `ContextWindowExceededError`, ... as on the other path.

What is ours: the stream is read with httpx-sse and each `data:` event is one
`json.loads` (`sse_json`), handed to `OpenAIReader` as a plain dict. Set
`stream: litellm` on a provider to send it through `litellm.acompletion` instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from providers import request_memo
from providers.finish import finish_for, inband_status
from providers.stream import ReasoningDelta, RefusalDelta, StreamItem, TextDelta, ToolCallDelta
from providers.streams import ReadEnd
from providers.streams.call_ids import CallIndex
from providers.streams.sse_json import Event, Wire, WireRequest, as_litellm_error, split_transport

__all__ = ["OPENAI", "WIRE_TYPES", "OpenAIReader", "build_request", "inband_error", "recall_request", "warm_up"]

WIRE_TYPES = frozenset({"openai", "scripted"})
"""Provider types whose streams this module reads (their LiteLLM family is `openai`)."""


def build_request(kwargs: dict[str, Any], *, secrets: Callable[[], list[str]] = list) -> WireRequest:
    """The HTTP request `litellm.acompletion(**kwargs)` would send, built by LiteLLM's OpenAI config
    (and remembered, see providers/request_memo.py; what `secrets()` returns never reaches the memo)."""
    from providers._litellm_internal import LlmProviders, OpenAIGPTConfig, ProviderConfigManager, get_optional_params

    draft = request_memo.draft(kwargs)
    params = dict(kwargs)
    model = params.pop("model").removeprefix("openai/")
    messages = params.pop("messages")
    transport = split_transport(params)
    organization = params.pop("organization", None)
    config = ProviderConfigManager.get_provider_chat_config(model=model, provider=LlmProviders.OPENAI)
    if not isinstance(config, OpenAIGPTConfig):  # see tests/test_litellm_internals.py
        raise RuntimeError(f"LiteLLM's openai chat config is {type(config).__qualname__}, not OpenAIGPTConfig")
    optional = get_optional_params(model=model, custom_llm_provider="openai", messages=messages, **params)
    extra_body = optional.pop("extra_body", None) or {}
    body = {**config.transform_request(model, messages, optional, {}, {}), **extra_body}
    body.pop("extra_body", None)
    api_key = config.get_api_key(transport.api_key)
    api_base = config.get_api_base(transport.api_base)
    headers = _account_headers(organization) | transport.extra_headers
    headers = config.validate_environment(headers, model, messages, optional, {}, api_key, api_base)
    url = config.get_complete_url(api_base, api_key, model, optional, {}, stream=True)
    if draft is not None:
        request_memo.remember(draft, url, headers, body, secrets())
    return WireRequest(OPENAI, model, url, headers, _serialised(body), transport.timeout)


def recall_request(kwargs: dict[str, Any]) -> WireRequest | None:
    """The request `build_request` gave last time for these arguments (any process), without LiteLLM."""
    recalled = request_memo.recall(kwargs)
    if recalled is None:
        return None
    model = kwargs["model"].removeprefix("openai/")
    body = _serialised(recalled.body)
    return WireRequest(OPENAI, model, recalled.url, recalled.headers, body, kwargs.get("timeout"), early=True)


def _serialised(body: dict[str, Any]) -> bytes:
    """The body's bytes as httpx writes `json=` (what LiteLLM's handler and the openai SDK send)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _account_headers(organization: str | None) -> dict[str, str]:
    """What the openai SDK adds on LiteLLM's path: organization (the `organization`
    param, `litellm.organization`, OPENAI_ORGANIZATION or OPENAI_ORG_ID) and project."""
    import os

    import litellm

    headers = {}
    organization = (
        organization or litellm.organization or os.environ.get("OPENAI_ORGANIZATION") or os.environ.get("OPENAI_ORG_ID")
    )
    if organization:
        headers["OpenAI-Organization"] = organization
    if project := os.environ.get("OPENAI_PROJECT_ID"):
        headers["OpenAI-Project"] = project
    return headers


def warm_up() -> None:
    """Initialise now what the first request would (LiteLLM fills its provider tables lazily),
    so a `gc.freeze()` after this covers it all."""
    build_request(
        {
            "model": "openai/gpt-4o-mini",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "api_key": "-",
            "api_base": "http://warm.invalid/v1",
        }
    )


# -- the stream ----------------------------------------------------------------


def _ends(chunk: Event) -> bool:
    """A `finish_reason` ends the answer (so does `data: [DONE]`, `Wire.done`); a stream that ends with
    `[DONE]` but no finish_reason (Snowflake Cortex) is a finished answer."""
    choices = chunk.get("choices")
    reason = choices[0].get("finish_reason") if choices else None
    if reason == "abort":
        from providers._litellm_internal import OpenAIError

        raise OpenAIError(status_code=500, message="Upstream generation aborted (finish_reason=abort)")
    return reason is not None


def _inband(chunk: Event, model: str) -> Exception | None:
    return inband_error(chunk["error"], model=model) if chunk.get("error") else None


def inband_error(error: object, *, model: str) -> Exception:
    """An error sent inside an HTTP 200 stream (`data: {"error": {...}}`: Groq's `tool_use_failed`,
    OpenRouter's `code: 400`, vLLM, proxies), mapped by LiteLLM like the same status over HTTP:
    a 400 is a `BadRequestError` (not retried), a 429 a `RateLimitError`, a 5xx a server error."""
    from providers._litellm_internal import OpenAIError

    message = error.get("message") if isinstance(error, dict) else str(error)
    text = message if isinstance(message, str) and message else json.dumps(error)
    return as_litellm_error(OpenAIError(status_code=inband_status(error), message=text), model=model, provider="openai")


_CUT = "Stream ended before a finish_reason or [DONE] was received"
OPENAI = Wire(provider="openai", ends=_ends, inband_error=_inband, http_error="OpenAIError", cut=_CUT, done="[DONE]")


class OpenAIReader:
    """One Chat Completions stream, one `chat.completion.chunk` at a time.

    Reasoning comes as `reasoning_content` (DeepSeek) or `reasoning` (vLLM, OpenRouter, Groq), a refusal
    as `delta.refusal`; tool-call fragments are numbered by id and index (`CallIndex`), their ids as sent.
    """

    __slots__ = ("_calls", "_cost", "_finish", "_input", "_model", "_output", "_refused")

    def __init__(self) -> None:
        self._calls = CallIndex()
        self._model: str | None = None
        self._finish: str | None = None
        self._refused = False
        self._input = self._output = 0
        self._cost: float | None = None

    def feed(self, chunk: Event) -> list[StreamItem]:
        if chunk.get("model"):
            self._model = chunk["model"]
        usage = chunk.get("usage")
        if usage and (usage.get("prompt_tokens") or usage.get("completion_tokens")):
            self._input, self._output = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
            self._cost = usage.get("cost")
        choices = chunk.get("choices")
        if not choices:
            return []
        choice = choices[0]
        self._finish = choice.get("finish_reason") or self._finish
        delta = choice.get("delta") or {}
        items: list[StreamItem] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            items.append(ReasoningDelta(reasoning))
        if delta.get("content"):
            items.append(TextDelta(delta["content"]))
        if delta.get("refusal"):
            self._refused = True
            items.append(RefusalDelta(delta["refusal"]))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            # the id as sent: packing a signature into it is LiteLLM's doing on its own path only
            fragment = ToolCallDelta(0, call.get("id"), function.get("name"), function.get("arguments") or "")
            items.append(self._calls.place(fragment, call.get("index")))
        return items

    def end(self) -> ReadEnd:
        finish = finish_for(self._finish, "openai", has_calls=self._calls.count > 0, refused=self._refused)
        return ReadEnd(self._finish, finish, self._model, self._input, self._output, self._cost)
