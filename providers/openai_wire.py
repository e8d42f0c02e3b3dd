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
`json.loads`, handed on as a plain dict. Set `stream: litellm` on a provider
to send it through `litellm.acompletion` instead.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from httpx_sse import EventSource

from providers import request_memo
from providers.answer_size import bound
from providers.failures import AnswerTooLarge
from providers.finish import inband_status
from providers.sse_json import close_response

__all__ = ["WIRE_TYPES", "WireRequest", "build_request", "inband_error", "recall_request", "stream_chunks", "warm_up"]

WIRE_TYPES = frozenset({"openai", "scripted"})
"""Provider types whose streams this module reads (their LiteLLM family is `openai`)."""

_TRANSPORT_KEYS = ("api_key", "api_base", "api_version", "extra_headers", "timeout", "max_retries", "num_retries")


@dataclass(frozen=True, slots=True)
class WireRequest:
    model: str  # the provider's model name, without LiteLLM's `openai/` prefix
    url: str
    headers: dict[str, str]
    body: dict[str, Any]
    timeout: float | None
    early: bool = False  # assembled from the memo while LiteLLM imports: sent without LiteLLM's client


def build_request(kwargs: dict[str, Any], *, secrets: Callable[[], list[str]] = list) -> WireRequest:
    """The HTTP request `litellm.acompletion(**kwargs)` would send, built by LiteLLM's OpenAI config
    (and remembered, see providers/request_memo.py; what `secrets()` returns never reaches the memo)."""
    from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig
    from litellm.types.utils import LlmProviders
    from litellm.utils import ProviderConfigManager, get_optional_params

    draft = request_memo.draft(kwargs)
    params = dict(kwargs)
    model = params.pop("model").removeprefix("openai/")
    messages = params.pop("messages")
    transport = {key: params.pop(key, None) for key in _TRANSPORT_KEYS}
    organization = params.pop("organization", None)
    config = ProviderConfigManager.get_provider_chat_config(model=model, provider=LlmProviders.OPENAI)
    if not isinstance(config, OpenAIGPTConfig):  # see tests/test_litellm_internals.py
        raise RuntimeError(f"LiteLLM's openai chat config is {type(config).__qualname__}, not OpenAIGPTConfig")
    optional = get_optional_params(model=model, custom_llm_provider="openai", messages=messages, **params)
    extra_body = optional.pop("extra_body", None) or {}
    body = {**config.transform_request(model, messages, optional, {}, {}), **extra_body}
    body.pop("extra_body", None)
    api_key = config.get_api_key(transport["api_key"])
    api_base = config.get_api_base(transport["api_base"])
    headers = _account_headers(organization) | dict(transport["extra_headers"] or {})
    headers = config.validate_environment(headers, model, messages, optional, {}, api_key, api_base)
    url = config.get_complete_url(api_base, api_key, model, optional, {}, stream=True)
    if draft is not None:
        request_memo.remember(draft, url, headers, body, secrets())
    return WireRequest(model=model, url=url, headers=headers, body=body, timeout=transport["timeout"])


def recall_request(kwargs: dict[str, Any]) -> WireRequest | None:
    """The request `build_request` gave last time for these arguments (any process), without LiteLLM."""
    recalled = request_memo.recall(kwargs)
    if recalled is None:
        return None
    model = kwargs["model"].removeprefix("openai/")
    return WireRequest(model, recalled.url, recalled.headers, recalled.body, kwargs.get("timeout"), early=True)


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
    """Import and initialise now what the first request would (LiteLLM fills its
    provider tables lazily), so a `gc.freeze()` after this covers it all."""
    import httpx  # noqa: F401
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type  # noqa: F401
    from litellm.llms.custom_httpx.http_handler import get_async_httpx_client  # noqa: F401

    build_request(
        {
            "model": "openai/gpt-4o-mini",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "api_key": "-",
            "api_base": "http://warm.invalid/v1",
        }
    )


async def stream_chunks(request: WireRequest, *, max_answer_bytes: int | None = None) -> AsyncIterator[dict[str, Any]]:
    """Yield each `chat.completion.chunk` as a dict; every failure is a LiteLLM exception.

    The end markers of this wire are `data: [DONE]` and a `finish_reason`: a body
    that ends (cleanly or not) before either is a cut stream; a stream that ends
    with `[DONE]` but no finish_reason (Snowflake Cortex) is a finished answer, and
    a connection dropped after a finish_reason keeps the answer. An in-band
    `{"error": ...}` is mapped by the status or type it carries. One event larger than
    `max_answer_bytes` could need is refused unread (`answer_size.BoundedEvents`).
    """
    import httpx

    client = _EarlyClient(request.url) if request.early else _litellm_client(request.url)
    response = None
    finished = False
    try:
        response = await client.post(
            request.url, json=request.body, headers=request.headers, timeout=request.timeout, stream=True
        )
        async for event in EventSource(bound(response, max_answer_bytes)).aiter_sse():
            if event.data == "[DONE]":
                finished = True
                continue  # read on to the end of the body, so the connection is reusable
            chunk = json.loads(event.data)
            if chunk.get("error"):
                raise _InBand(inband_error(chunk["error"], model=request.model))
            finished = finished or _finish_reason(chunk) is not None
            yield chunk
        if not finished:
            raise httpx.RemoteProtocolError("Stream ended before a finish_reason or [DONE] was received")
    except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
        if not finished:
            raise _mapped(request.model, exc) from None
    except _InBand as exc:
        raise exc.mapped from None
    except AnswerTooLarge:
        raise  # ours, not the provider's: no status for LiteLLM to map
    except Exception as exc:
        raise _mapped(request.model, exc) from None
    finally:
        if response is not None:
            await close_response(response)
        if isinstance(client, _EarlyClient):
            await client.aclose()


def _litellm_client(url: str) -> Any:
    from litellm.llms.custom_httpx.http_handler import get_async_httpx_client

    from providers.offline import in_process_client

    return in_process_client(url) or get_async_httpx_client(llm_provider="openai")


class _EarlyClient:
    """A request sent before LiteLLM's client exists: plain httpx, failing as LiteLLM's handler does
    (a non-2xx status is an `HTTPStatusError` with its body read), on the in-memory transport when
    the URL is offline. Used for one request and closed."""

    def __init__(self, url: str) -> None:
        import httpx

        from providers.offline import in_process_transport

        self._client = httpx.AsyncClient(transport=in_process_transport(url))

    async def post(self, url: str, *, json: Any, headers: dict[str, str], timeout: float | None, stream: bool) -> Any:
        request = self._client.build_request("POST", url, json=json, headers=headers, timeout=timeout)
        response = await self._client.send(request, stream=stream)
        if response.status_code >= 400:
            await response.aread()
            response.raise_for_status()
        return response

    async def aclose(self) -> None:
        await self._client.aclose()


def _finish_reason(chunk: dict[str, Any]) -> str | None:
    choices = chunk.get("choices")
    reason = choices[0].get("finish_reason") if choices else None
    if reason == "abort":
        from litellm.llms.openai.common_utils import OpenAIError

        raise OpenAIError(status_code=500, message="Upstream generation aborted (finish_reason=abort)")
    return reason


class _InBand(Exception):
    """Carries an already mapped in-band error past the generic mapping."""

    def __init__(self, mapped: Exception) -> None:
        super().__init__(str(mapped))
        self.mapped = mapped


def inband_error(error: Any, *, model: str) -> Exception:
    """An error sent inside an HTTP 200 stream (`data: {"error": {...}}`: Groq's `tool_use_failed`,
    OpenRouter's `code: 400`, vLLM, proxies), mapped by LiteLLM like the same status over HTTP:
    a 400 is a `BadRequestError` (not retried), a 429 a `RateLimitError`, a 5xx a server error."""
    from litellm.llms.openai.common_utils import OpenAIError

    message = error.get("message") if isinstance(error, dict) else str(error)
    text = message if isinstance(message, str) and message else json.dumps(error)
    return _mapped(model, OpenAIError(status_code=inband_status(error), message=text))


def _mapped(model: str, exc: Exception) -> Exception:
    """LiteLLM's own mapping: status and message -> RateLimitError, ContextWindowExceededError, ..."""
    import httpx
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type
    from litellm.llms.openai.common_utils import OpenAIError

    if isinstance(exc, httpx.HTTPStatusError):
        try:
            text = exc.response.text  # LiteLLM's handler has read (and masked) the body
        except httpx.ResponseNotRead:
            text = str(getattr(exc, "message", "") or exc)
        exc = OpenAIError(status_code=exc.response.status_code, message=text, headers=exc.response.headers)
    try:
        exception_type(model=model, original_exception=exc, custom_llm_provider="openai")
    except Exception as mapped:
        return mapped
    return exc
