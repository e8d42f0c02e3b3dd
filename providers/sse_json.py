"""The stream loop the Anthropic and Gemini readers share: POST on LiteLLM's client, one JSON event per SSE
message, the provider's own end marker, and every failure mapped to LiteLLM's exception classes.

A body that ends (cleanly or not) before the end marker is a cut stream (`httpx.RemoteProtocolError`,
retried); a connection dropped after it is a finished answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from httpx_sse import EventSource

Event = dict[str, Any]


async def json_events(
    provider: str,
    request: Any,  # AnthropicRequest | GeminiRequest: url, content, headers, timeout, model
    *,
    inband_error: Callable[[Event], Exception | None],
    ends: Callable[[Event], bool],
    cut: str,
    mapped: Callable[[str, Exception], Awaitable[Exception]],
) -> AsyncIterator[Event]:
    """Yield each event's data; `inband_error` says which events are failures, `ends` which is the end marker."""
    import httpx
    from litellm.llms.custom_httpx.http_handler import get_async_httpx_client

    client = get_async_httpx_client(llm_provider=provider)
    response = None
    finished = False
    try:
        response = await client.post(
            request.url, content=request.content, headers=request.headers, timeout=request.timeout, stream=True
        )
        async for sse in EventSource(response).aiter_sse():
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
            raise await mapped(request.model, exc) from None
    except Exception as exc:
        raise await mapped(request.model, exc) from None
    finally:
        if response is not None:
            await response.aclose()
