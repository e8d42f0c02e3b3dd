"""A deterministic model for tests, examples and the offline demo.

It answers at the HTTP level through respx with the bytes a real provider
sends (see `providers.sse`), so request building (LiteLLM's) and stream
parsing run exactly as in production. Use it with a `type: scripted` provider
(OpenAI wire format at `SCRIPTED_BASE_URL`)::

    model = ScriptedModel([ScriptedResponse(text="Hello!")])
    with model.serving():            # or model.mount(existing_respx_router)
        ...  # ModelClient(config).stream("demo", messages)

`wire="anthropic"` / `"gemini"` serve those providers' real endpoints instead,
for tests of the other parsers. Faults (`ScriptedFault`, `cut_after`,
`malformed`, `hang_after`) exercise retries, restarts and cancellation.

`transport()` serves the same bytes on an in-memory httpx transport instead
of respx: `providers.offline` uses it for `type: offline` models (the built-in
`test` alias, script files, Python functions), with nothing patched globally.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import httpx
import respx

from providers.config import SCRIPTED_BASE_URL
from providers.sse import SSECall, anthropic_events, gemini_events, openai_events

__all__ = ["ScriptedCall", "ScriptedFault", "ScriptedModel", "ScriptedResponse", "Wire"]

Wire = Literal["openai", "anthropic", "gemini"]
_DEFAULT_BASE = {
    "openai": SCRIPTED_BASE_URL,
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}


@dataclass
class ScriptedCall:
    name: str
    arguments: dict[str, Any] | str  # str = raw JSON text, possibly invalid (for tests)


@dataclass
class ScriptedResponse:
    text: str = ""
    tool_calls: list[ScriptedCall] = field(default_factory=list)
    chunk_size: int = 8
    usage: tuple[int, int] = (10, 5)
    cut_after: int | None = None  # drop the connection after this many SSE events
    malformed: bool = False  # send one SSE line that is not JSON after the first event
    hang_after: int | None = None  # stop sending (but stay open) after this many events


@dataclass
class ScriptedFault:
    """An HTTP error answer instead of a stream, e.g. 429 with Retry-After."""

    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted fault"


Step = ScriptedResponse | ScriptedFault


class ScriptedModel:
    def __init__(
        self,
        responses: list[Step] | Callable[[dict[str, Any]], Step],
        *,
        wire: Wire = "openai",
        keep_requests: bool = True,
    ):
        if wire not in _DEFAULT_BASE:
            raise ValueError(f"wire must be one of {sorted(_DEFAULT_BASE)}, got {wire!r}")
        self.wire: Wire = wire
        self._script = responses
        self._keep_requests = keep_requests  # off for long-lived in-process models
        self._served = 0
        self.requests: list[dict[str, Any]] = []  # JSON bodies received, in order
        self.streams_opened = 0
        self.streams_closed = 0

    # -- serving -------------------------------------------------------------

    def mount(self, router: respx.Router | None = None, base_url: str | None = None) -> respx.Route:
        """Add this model's endpoint to `router` (default: the global respx router)."""
        target = router if router is not None else respx
        base = (base_url or _DEFAULT_BASE[self.wire]).rstrip("/")
        if self.wire == "openai":
            route = target.post(f"{base}/chat/completions")
        elif self.wire == "anthropic":
            route = target.post(f"{base}/v1/messages")
        else:
            route = target.post(url__regex=rf"^{base}/v1(beta)?/models/[^/:]+:streamGenerateContent")
        return route.mock(side_effect=self._handle)

    @contextmanager
    def serving(self, base_url: str | None = None, *, pass_through_others: bool = False) -> Iterator[respx.MockRouter]:
        """Serve on a fresh respx router.

        Requests to other hosts fall to routers started earlier (so several
        scripted models can serve side by side) and fail if none matches;
        `pass_through_others=True` sends them to the network instead.
        """
        with respx.mock(assert_all_called=False) as router:
            self.mount(router, base_url)
            if pass_through_others:
                router.route().pass_through()
            yield router

    # -- answering -----------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        """An in-memory httpx transport answering every request with this model."""
        return httpx.MockTransport(self._handle)

    def _next_step(self, body: dict[str, Any]) -> Step | None:
        if callable(self._script):
            return self._script(body)
        index = self._served - 1
        return self._script[index] if index < len(self._script) else None

    def _handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self._served += 1
        if self._keep_requests:
            self.requests.append(body)
        step = self._next_step(body)
        if step is None:
            count = len(self._script) if isinstance(self._script, list) else 0
            return _error(400, f"scripted model: script exhausted after {count} responses (request #{self._served})")
        if isinstance(step, ScriptedFault):
            return _error(step.status, step.message, step.headers)
        model = str(body.get("model") or request.url.path.rsplit("/", 1)[-1].split(":")[0])
        events = self._events(step, model)
        if step.malformed:
            events.insert(1, b"data: {this is not json\n\n")
        stream = _ScriptedStream(events, step.cut_after, step.hang_after, self)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)

    def _events(self, step: ScriptedResponse, model: str) -> list[bytes]:
        n = self._served
        calls = [
            SSECall(
                call.name,
                call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments),
                id=f"{'toolu' if self.wire == 'anthropic' else 'call'}_{n:02d}_{i}",
            )
            for i, call in enumerate(step.tool_calls)
        ]
        args: _StreamArgs = {"model": model, "usage": step.usage, "chunk_size": step.chunk_size}
        if self.wire == "anthropic":
            return anthropic_events(step.text, calls, message_id=f"msg_scripted_{n}", **args)
        if self.wire == "gemini":
            return gemini_events(step.text, calls, **args)
        return openai_events(step.text, calls, response_id=f"chatcmpl-scripted-{n}", **args)


class _StreamArgs(TypedDict):
    """What every wire's event builder takes besides the text and the calls."""

    model: str
    usage: tuple[int, int]
    chunk_size: int


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"error": {"message": message, "type": "scripted_error", "code": status}}
    return httpx.Response(status, json=body, headers=headers or {})


class _ScriptedStream(httpx.AsyncByteStream, httpx.SyncByteStream):
    """SSE events with optional faults; counts opens and closes for cancellation tests."""

    def __init__(self, events: list[bytes], cut_after: int | None, hang_after: int | None, owner: ScriptedModel):
        self._events = events
        self._cut_after = cut_after
        self._hang_after = hang_after
        self._owner = owner
        self._closed = False
        owner.streams_opened += 1

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i, event in enumerate(self._events):
            if self._cut_after is not None and i >= self._cut_after:
                raise httpx.RemoteProtocolError(
                    "scripted: peer closed connection without sending complete message body"
                )
            if self._hang_after is not None and i >= self._hang_after:
                await asyncio.Event().wait()  # stays open until the consumer cancels
            yield event

    def __iter__(self) -> Iterator[bytes]:
        for i, event in enumerate(self._events):
            if self._cut_after is not None and i >= self._cut_after:
                raise httpx.RemoteProtocolError(
                    "scripted: peer closed connection without sending complete message body"
                )
            yield event

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._owner.streams_closed += 1
