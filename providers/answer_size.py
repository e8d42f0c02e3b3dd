"""The cap on one answer's size (a model's `max_answer_bytes`), counted on every stream path.

A provider that floods (a model stuck repeating itself, a broken proxy, a hostile endpoint) was read
on for as long as it sent: 3.2 GB of host memory in 24 s. Two counts stop it:

- `AnswerSize`, in the client's one loop over every path's items (the runtime's readers and
  LiteLLM's), adds the UTF-8 bytes of text, reasoning, refusal, tool arguments and provider blocks;
  past the cap the answer fails with `AnswerTooLarge`, which is not retried (the same request would
  most likely flood again, at the price of the tokens) but falls back along the chain.
- `BoundedEvents`, under the runtime's own SSE readers, counts the raw bytes since the last event
  boundary: one event that never ends (no blank line, or `data:` lines without end) is held whole by
  the SSE decoder, so it is refused unread once it passes what the cap could ever need. LiteLLM reads
  its own streams; on its path only the items are counted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx

from providers.failures import AnswerTooLarge
from providers.stream import ProviderBlock, ReasoningDelta, RefusalDelta, StreamItem, TextDelta, ToolCallDelta

__all__ = ["AnswerSize", "BoundedEvents", "bound", "event_limit"]

_SLACK = 64 * 1024  # an event's own framing and JSON around the text it carries


def event_limit(max_answer_bytes: int) -> int:
    """The most raw bytes one SSE event may hold: twice the cap (escapes can double text in JSON) and framing."""
    return 2 * max_answer_bytes + _SLACK


class AnswerSize:
    """Bytes of one answer so far, against its cap; `add` raises `AnswerTooLarge` past it."""

    __slots__ = ("_left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._left = limit

    def add(self, item: StreamItem) -> None:
        """Count one item (on every item of every answer: kept to a few type checks and a `len`)."""
        if isinstance(item, TextDelta):
            text = item.text
        elif isinstance(item, ToolCallDelta):
            text = item.arguments
        elif isinstance(item, ReasoningDelta):
            text = item.text + (item.signature or "") + (item.redacted or "")
        elif isinstance(item, RefusalDelta):
            text = item.text
        elif isinstance(item, ProviderBlock):
            text = json.dumps(item.block, default=str)
        else:
            return
        self._left -= len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if self._left < 0:
            raise AnswerTooLarge(
                f"the answer passed max_answer_bytes ({self.limit} bytes of text, reasoning and tool arguments);"
                " the stream was cut"
            )


class BoundedEvents(httpx.AsyncByteStream):
    """A response body whose events may hold at most `limit` bytes each (see the module's docstring)."""

    def __init__(self, inner: httpx.AsyncByteStream, limit: int, max_answer_bytes: int) -> None:
        self._inner = inner
        self._limit = limit
        self._cap = max_answer_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = 0  # bytes since the last blank line
        last = b""  # the previous read's last byte: a boundary may fall between two reads
        async for chunk in self._inner:
            cut = max(chunk.rfind(b"\n\n"), chunk.rfind(b"\n\r\n"), chunk.rfind(b"\r\r"))
            if cut >= 0:
                pending = len(chunk) - cut
            elif last in (b"\n", b"\r") and chunk[:1] in (b"\n", b"\r"):
                pending = len(chunk)
            else:
                pending += len(chunk)
            if pending > self._limit:
                raise AnswerTooLarge(
                    f"one stream event passed {self._limit} bytes, more than max_answer_bytes ({self._cap})"
                    " allows; the stream was cut unread"
                )
            last = chunk[-1:]
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def bound(response: httpx.Response, max_answer_bytes: int | None) -> httpx.Response:
    """`response`, its body read through `BoundedEvents` (unchanged without a cap)."""
    stream = response.stream
    if max_answer_bytes is not None and isinstance(stream, httpx.AsyncByteStream):
        response.stream = BoundedEvents(stream, event_limit(max_answer_bytes), max_answer_bytes)
    return response
