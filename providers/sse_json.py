"""The stream loop the Anthropic and Gemini readers share: POST on LiteLLM's client, one JSON event per SSE
message, the provider's own end marker, and every failure mapped to LiteLLM's exception classes.

A body that ends (cleanly or not) before the end marker is a cut stream (`httpx.RemoteProtocolError`,
retried); a connection dropped after it is a finished answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from httpx_sse import EventSource

from providers.answer_size import bound
from providers.failures import AnswerTooLarge

if TYPE_CHECKING:
    import httpx

Event = dict[str, Any]
HttpError = Callable[[int, str, "httpx.Headers"], Exception]
"""The provider's LiteLLM error class for an HTTP failure (status, body, headers), which `exception_type` maps."""


async def json_events(
    provider: str,
    request: Any,  # AnthropicRequest | GeminiRequest: url, content, headers, timeout, model
    *,
    inband_error: Callable[[Event], Exception | None],
    ends: Callable[[Event], bool],
    cut: str,
    http_error: HttpError,
    max_answer_bytes: int | None = None,
) -> AsyncIterator[Event]:
    """Yield each event's data; `inband_error` says which events are failures, `ends` which is the end marker.
    One event larger than `max_answer_bytes` could need is refused unread (`answer_size.BoundedEvents`)."""
    import httpx
    from litellm.llms.custom_httpx.http_handler import get_async_httpx_client

    client = get_async_httpx_client(llm_provider=provider)
    response = None
    finished = False
    try:
        response = await client.post(
            request.url, content=request.content, headers=request.headers, timeout=request.timeout, stream=True
        )
        async for sse in EventSource(bound(response, max_answer_bytes)).aiter_sse():
            if not sse.data:
                continue
            event = json.loads(sse.data)
            error = inband_error(event)
            if error is not None:
                raise error
            finished = finished or ends(event)
            yield event
        if not finished:
            raise httpx.RemoteProtocolError(cut, request=response.request)
    except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
        if not finished:
            raise await _mapped(provider, request.model, exc, http_error) from None
    except AnswerTooLarge:
        raise  # ours, not the provider's: no status for LiteLLM to map
    except Exception as exc:
        raise await _mapped(provider, request.model, exc, http_error) from None
    finally:
        if response is not None:
            await close_response(response)


async def close_response(response: httpx.Response) -> None:
    """Close a streamed response and break its reference cycle: httpx's response holds its stream, which
    holds the response back, and some 45 objects hang from the pair (request, URL, headers, the pool's
    streams). A long conversation carries them into the old generation, where only a full collection
    would find them."""
    import httpx

    await response.aclose()
    response.stream = httpx.ByteStream(b"")


async def _mapped(provider: str, model: str, exc: Exception, http_error: HttpError) -> Exception:
    """LiteLLM's own mapping: status and message -> RateLimitError, ContextWindowExceededError, ..."""
    import httpx
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type

    if getattr(exc, "litellm_debug_info", None) is not None or type(exc).__module__.startswith("litellm.exceptions"):
        return exc  # already one of LiteLLM's mapped classes (an in-band error event)
    if isinstance(exc, httpx.HTTPStatusError):
        try:
            text = (await exc.response.aread()).decode(errors="replace")
        except (httpx.StreamError, RuntimeError):
            text = str(exc)
        exc = http_error(exc.response.status_code, text, exc.response.headers)
    try:
        exception_type(model=model, original_exception=exc, custom_llm_provider=provider)
    except Exception as mapped:
        return mapped
    return exc
