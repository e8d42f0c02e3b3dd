"""The transport of the runtime's three readers: the request LiteLLM built, sent on LiteLLM's client, read
back as one JSON event per SSE message, up to the wire's own end marker, every failure mapped to LiteLLM's
exception classes.

The OpenAI wire, Anthropic Messages and Gemini differ only in what `Wire` says: their end marker, how an
error inside the stream looks, and which LiteLLM error class an HTTP failure becomes. A body that ends
(cleanly or not) before the end marker is a cut stream (`httpx.RemoteProtocolError`, retried); a connection
dropped after it is a finished answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from httpx_sse import EventSource

from providers.answer_size import bound
from providers.failures import AnswerTooLarge

if TYPE_CHECKING:
    import httpx

__all__ = [
    "Transport",
    "Wire",
    "WireRequest",
    "as_litellm_error",
    "close_response",
    "json_events",
    "mapped",
    "split_transport",
]

Event = dict[str, Any]
"""One SSE message's data, parsed: the provider's own JSON, read by the wire's reader."""

TRANSPORT_KEYS = ("api_key", "api_base", "api_version", "extra_headers", "timeout", "max_retries", "num_retries")
"""`litellm.acompletion` arguments that say how to send a request, not what it asks: never model parameters."""


@dataclass(frozen=True, slots=True)
class Transport:
    api_key: str | None
    api_base: str | None
    extra_headers: dict[str, str]
    timeout: float | None


def split_transport(params: dict[str, Any]) -> Transport:
    """Take the transport arguments out of `params` (LiteLLM's call arguments), leaving what LiteLLM maps.
    Retries are the client's (tenacity), and no wire here takes an `api_version`: both are dropped."""
    taken = {key: params.pop(key, None) for key in TRANSPORT_KEYS}
    return Transport(taken["api_key"], taken["api_base"], dict(taken["extra_headers"] or {}), taken["timeout"])


@dataclass(frozen=True, slots=True)
class Wire:
    """What one wire's stream looks like to the transport."""

    provider: str  # LiteLLM's provider name: its HTTP client and its error mapping are per provider
    ends: Callable[[Event], bool]  # whether this event is (or carries) the end marker
    inband_error: Callable[[Event, str], Exception | None]  # (event, model) -> the failure it reports, if any
    http_error: str  # the LiteLLM error class an HTTP failure becomes (its name in `providers._litellm_internal`)
    cut: str  # what a body that ends before the end marker is called
    done: str | None = None  # an SSE data that is itself the end marker (`[DONE]` on the OpenAI wire)


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One request as LiteLLM would send it, and the wire its answer streams on."""

    wire: Wire
    model: str  # the provider's model name, without LiteLLM's `provider/` prefix
    url: str
    headers: dict[str, str]
    content: bytes  # the body, serialised as LiteLLM (or httpx, for the OpenAI wire) serialises it
    timeout: float | None
    tool_names: Mapping[str, str] = field(default_factory=dict)  # name sent -> the caller's (LiteLLM renames some)
    early: bool = False  # assembled from the memo while LiteLLM imports: sent without LiteLLM's client


async def json_events(request: WireRequest, *, max_answer_bytes: int | None = None) -> AsyncIterator[Event]:
    """Yield each event's data; every failure is a LiteLLM exception. One event larger than
    `max_answer_bytes` could need is refused unread (`answer_size.BoundedEvents`)."""
    import httpx

    wire = request.wire
    client = _EarlyClient(request.url) if request.early else _litellm_client(request.url, wire.provider)
    response = None
    finished = False
    try:
        response = await client.post(
            request.url, content=request.content, headers=request.headers, timeout=request.timeout, stream=True
        )
        async for sse in EventSource(bound(response, max_answer_bytes)).aiter_sse():
            if not sse.data:
                continue
            if sse.data == wire.done:
                finished = True
                continue  # read on to the end of the body, so the connection is reusable
            event = json.loads(sse.data)
            error = wire.inband_error(event, request.model)
            if error is not None:
                raise error
            finished = finished or wire.ends(event)
            yield event
        if not finished:
            raise httpx.RemoteProtocolError(wire.cut, request=response.request)
    except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
        if not finished:
            raise await mapped(wire, request.model, exc) from None
    except AnswerTooLarge:
        raise  # ours, not the provider's: no status for LiteLLM to map
    except Exception as exc:
        raise await mapped(wire, request.model, exc) from None
    finally:
        if response is not None:
            await close_response(response)
        if isinstance(client, _EarlyClient):
            await client.aclose()


async def close_response(response: httpx.Response) -> None:
    """Close a streamed response and break its reference cycle: httpx's response holds its stream, which
    holds the response back, and some 45 objects hang from the pair (request, URL, headers, the pool's
    streams). A long conversation carries them into the old generation, where only a full collection
    would find them."""
    import httpx

    await response.aclose()
    response.stream = httpx.ByteStream(b"")


async def mapped(wire: Wire, model: str, exc: Exception) -> Exception:
    """What LiteLLM's own path raises for `exc`: an HTTP failure as the wire's error class, then mapped."""
    import httpx

    if getattr(exc, "litellm_debug_info", None) is not None or type(exc).__module__.startswith("litellm.exceptions"):
        return exc  # already one of LiteLLM's mapped classes (an in-band error event)
    if isinstance(exc, httpx.HTTPStatusError):
        from providers import _litellm_internal

        error_class = getattr(_litellm_internal, wire.http_error)  # status, message, headers: as LiteLLM raises it
        exc = error_class(status_code=exc.response.status_code, message=await _body(exc), headers=exc.response.headers)
    return as_litellm_error(exc, model=model, provider=wire.provider)


def as_litellm_error(exc: Exception, *, model: str, provider: str) -> Exception:
    """LiteLLM's own mapping: status and message -> RateLimitError, ContextWindowExceededError, ..."""
    from providers._litellm_internal import exception_type

    try:
        exception_type(model=model, original_exception=exc, custom_llm_provider=provider)
    except Exception as mapping:
        return mapping
    return exc


async def _body(exc: httpx.HTTPStatusError) -> str:
    """The error's body: LiteLLM's handler (and `_EarlyClient`) read it before raising."""
    import httpx

    try:
        return (await exc.response.aread()).decode(errors="replace")
    except (httpx.StreamError, RuntimeError):
        return str(getattr(exc, "message", "") or exc)


def _litellm_client(url: str, provider: str) -> Any:
    """LiteLLM's cached client for `provider` (one per event loop), or its handler on the in-memory transport
    when `url` is an offline model's (providers/offline.py)."""
    from providers._litellm_internal import get_async_httpx_client
    from providers.offline import in_process_client

    return in_process_client(url) or get_async_httpx_client(llm_provider=provider)


class _EarlyClient:
    """A request sent before LiteLLM's client exists: plain httpx, failing as LiteLLM's handler does
    (a non-2xx status is an `HTTPStatusError` with its body read), on the in-memory transport when
    the URL is offline. Used for one request and closed."""

    def __init__(self, url: str) -> None:
        import httpx

        from providers.offline import in_process_transport

        self._client = httpx.AsyncClient(transport=in_process_transport(url))

    async def post(
        self, url: str, *, content: bytes, headers: dict[str, str], timeout: float | None, stream: bool
    ) -> httpx.Response:
        request = self._client.build_request("POST", url, content=content, headers=headers, timeout=timeout)
        response = await self._client.send(request, stream=stream)
        if response.status_code >= 400:
            await response.aread()
            response.raise_for_status()
        return response

    async def aclose(self) -> None:
        await self._client.aclose()
