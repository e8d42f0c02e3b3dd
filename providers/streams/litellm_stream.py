"""LiteLLM's own stream path (`stream: litellm`, and every provider type without a reader of its own).

`litellm.acompletion` parses the stream; `LiteLLMReader` turns its chunks into the runtime's
neutral items and adds what the raw-event tap (`litellm_tap.RawTap`) saw that the chunks lack.
Everything provider-specific in a LiteLLM delta is read here: text, reasoning
(`reasoning_content`, or Anthropic `thinking_blocks` with their signatures), tool calls (a
Gemini thought signature packed into the id is split back out), and, where the tap does not
read the raw events, the Anthropic server-tool blocks LiteLLM keeps in `provider_specific_fields`.
`LiteLLMChunks` is LiteLLM's stream ending where the provider's end marker says it does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from providers._litellm_internal import (
    THOUGHT_SIGNATURE_SEPARATOR,
    CustomStreamWrapper,
    ModelResponseStream,
    inner_stream,
    parses_chunks,
    reads_sse,
)
from providers.failures import StreamCut
from providers.finish import Vocabulary, finish_for
from providers.stream import (
    ModelInfo,
    ProviderBlock,
    ReasoningDelta,
    RefusalDelta,
    StreamItem,
    TextDelta,
    ToolCallDelta,
)
from providers.streams import ReadEnd
from providers.streams.anthropic_wire import streamed_input
from providers.streams.call_ids import CallIndex
from providers.streams.litellm_tap import MARKED, RawTap
from providers.streams.openai_wire import inband_error

__all__ = ["LiteLLMChunks", "LiteLLMReader", "delta_items", "reading", "split_signature", "tap_for"]

_ANTHROPIC_BLOCK_KEYS = ("server_tool_calls", "web_search_results", "tool_results")
_TAPPED = frozenset({"anthropic", "gemini", "vertex_ai"})
_VOCABULARY: dict[str, Vocabulary] = {"anthropic": "anthropic", "gemini": "gemini"}


def reading(info: ModelInfo, wrapper: CustomStreamWrapper) -> tuple[LiteLLMChunks, LiteLLMReader]:
    """The chunks of the response `litellm.acompletion` opened, and their reader (with a tap where one fits)."""
    reader = LiteLLMReader(tap_for(info, wrapper), info.model)
    return LiteLLMChunks(wrapper, reader), reader


def tap_for(info: ModelInfo, wrapper: object) -> RawTap | None:
    """A tap on the events under LiteLLM's wrapper, for the stream shapes `RawTap` knows."""
    inner = inner_stream(wrapper)
    if info.provider_type in _TAPPED and info.dialect in ("anthropic", "gemini"):
        family = info.dialect
    elif reads_sse(inner):
        family = "openai"  # the openai SDK's stream: OpenAI-compatible providers on LiteLLM's path
    elif info.dialect == "openai" and (parses_chunks(inner) or inner is None):
        family = "openai_like"  # LiteLLM's own iterator over OpenAI-shaped chunks (Groq, ...): errors only
    else:
        return None
    tap = RawTap(family)
    tap.install(wrapper)
    return tap if tap.installed else None


def split_signature(call_id: str | None) -> tuple[str | None, str | None]:
    """`(id, signature)` from an id LiteLLM packed a Gemini thought signature into (`<id>__thought__<signature>`)."""
    if call_id and THOUGHT_SIGNATURE_SEPARATOR in call_id:
        head, signature = call_id.split(THOUGHT_SIGNATURE_SEPARATOR, 1)
        return head, signature or None
    return call_id, None


class LiteLLMReader:
    """One response on LiteLLM's path: its chunks (`ModelResponseStream`) and what the tap saw beside them."""

    __slots__ = ("_calls", "_cost", "_finish", "_input", "_model", "_output", "_refused", "_seen_blocks", "_tap")

    def __init__(self, tap: RawTap | None, model: str) -> None:
        self._tap = tap
        self._model = model  # LiteLLM's model string, until a chunk names the model that answered
        self._calls = CallIndex()
        self._finish: str | None = None
        self._refused = False
        self._input = self._output = 0
        self._cost: float | None = None
        # Anthropic server-tool blocks: the tap reads them from the raw events, else LiteLLM's delta fields hold them
        self._seen_blocks: dict[str, int] | None = None if tap is not None and tap.family == "anthropic" else {}

    def feed(self, chunk: ModelResponseStream) -> list[StreamItem]:
        # LiteLLM keeps most chunk fields in pydantic's extra dict, where each attribute read goes through
        # `BaseModel.__getattr__` (~1.4 us); `model_extra` reads them in ~0.1 us (issue 14, item 5).
        if chunk.model:
            self._model = chunk.model
        extra = chunk.model_extra or {}
        usage = extra["usage"] if "usage" in extra else getattr(chunk, "usage", None)
        if usage is not None and (usage.prompt_tokens or usage.completion_tokens):
            self._input, self._output = usage.prompt_tokens or 0, usage.completion_tokens or 0
            self._cost = getattr(usage, "cost", None)
        items = self._placed(self._tap.drain()) if self._tap is not None else []
        if not chunk.choices:
            return items
        choice = chunk.choices[0]
        self._finish = choice.finish_reason or self._finish
        return items + self._placed(delta_items(choice.delta, self._seen_blocks))

    def end(self) -> ReadEnd:
        """How the answer ended: the tap's raw word where it saw one, else LiteLLM's; raises for an in-band
        error LiteLLM let pass and for a stream without its end marker (cut short)."""
        tap = self._tap
        if tap is None:
            finish = finish_for(self._finish, "openai", has_calls=self._calls.count > 0, refused=self._refused)
            return ReadEnd(self._finish, finish, self._model, self._input, self._output, self._cost)
        tail = self._placed(tap.drain())
        self._raise_inband()
        if tap.installed and tap.family in MARKED and not tap.ended:
            raise StreamCut(f"the {tap.family} stream ended without its end marker (cut short)")
        raw = tap.raw_finish or self._finish
        # the tap's word is the provider's own; LiteLLM's chunks speak the OpenAI wire's
        vocabulary: Vocabulary = _VOCABULARY.get(tap.family, "openai") if tap.raw_finish else "openai"
        if tap.usage and not self._input:
            self._input, self._output = tap.usage  # LiteLLM dropped it with the missing finish_reason
        if tap.output_tokens is not None:
            self._output = tap.output_tokens
        finish = finish_for(
            raw, vocabulary, has_calls=self._calls.count > 0, refused=self._refused, prompt_blocked=tap.blocked
        )
        return ReadEnd(raw, finish, self._model, self._input, self._output, self._cost, tail)

    def ended_by(self, exc: Exception) -> bool:
        """LiteLLM raised at the end of a stream: an in-band error is mapped by its own status; a stream
        that ended with `[DONE]` (Snowflake Cortex sends no finish_reason) is a finished answer."""
        if self._tap is None:
            return False
        self._raise_inband()
        return self._tap.done and "finish_reason" in str(exc)

    def _raise_inband(self) -> None:
        if self._tap is not None and self._tap.error is not None:
            raise inband_error(self._tap.error, model=self._model) from None

    def _placed(self, items: Iterable[StreamItem]) -> list[StreamItem]:
        placed: list[StreamItem] = []
        for item in items:
            if isinstance(item, ToolCallDelta):
                item = self._calls.place(item, item.index)
            elif isinstance(item, RefusalDelta):
                self._refused = True
            placed.append(item)
        return placed


class LiteLLMChunks:
    """LiteLLM's stream of one response, ending where the provider's end marker says: LiteLLM raises at the
    end of some streams that ended well, or lets an in-band error pass as a generic failure (`ended_by`)."""

    __slots__ = ("_inner", "_reader", "_wrapper")

    def __init__(self, wrapper: CustomStreamWrapper, reader: LiteLLMReader) -> None:
        self._wrapper = wrapper
        self._inner: AsyncIterator[ModelResponseStream] = wrapper.__aiter__()
        self._reader = reader

    def __aiter__(self) -> LiteLLMChunks:
        return self

    async def __anext__(self) -> ModelResponseStream:
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            if self._reader.ended_by(exc):
                raise StopAsyncIteration from None
            raise

    async def aclose(self) -> None:
        closer = getattr(self._wrapper, "aclose", None)
        if closer is not None:
            await closer()


def delta_items(delta: object, seen_blocks: dict[str, int] | None) -> Iterable[StreamItem]:
    """Translate one LiteLLM delta into neutral items (`seen_blocks` None: the tap reads blocks).

    Fields are read from the model's own dicts: LiteLLM's `Delta` keeps most of them in pydantic's
    extra dict (an attribute read costs ~2 us) and deletes absent ones (a missed `getattr` ~7 us)."""
    if delta is None:
        return
    fields = _fields(delta)
    yield from _reasoning(fields)
    content = fields.get("content")
    if content:
        yield TextDelta(content)
    for call in fields.get("tool_calls") or ():
        call_fields = _fields(call)
        function = call_fields.get("function")
        function_fields = _fields(function) if function is not None else {}
        call_id, signature = split_signature(call_fields.get("id"))
        provider_fields = call_fields.get("provider_specific_fields") or {}
        index = call_fields.get("index")
        yield ToolCallDelta(
            index=index if index is not None else 0,
            id=call_id,
            name=function_fields.get("name"),
            arguments=function_fields.get("arguments") or "",
            signature=signature or provider_fields.get("thought_signature"),
        )
    if seen_blocks is not None:
        yield from _provider_blocks(fields.get("provider_specific_fields") or {}, seen_blocks)


def _fields(model: Any) -> dict[str, Any]:
    """A pydantic model's fields and extras as one dict (a plain dict as it is)."""
    if isinstance(model, dict):
        return model
    fields: dict[str, Any] = getattr(model, "__dict__", {})
    extra = getattr(model, "__pydantic_extra__", None)
    return {**fields, **extra} if extra else fields


def _reasoning(fields: dict[str, Any]) -> Iterable[ReasoningDelta]:
    """Anthropic thinking (with its signature) from `thinking_blocks`, else `reasoning_content`."""
    blocks = fields.get("thinking_blocks")
    if blocks:
        for block in blocks:
            data = block if isinstance(block, dict) else dict(block)
            if data.get("type") == "redacted_thinking":
                yield ReasoningDelta("", redacted=data.get("data"))
            elif data.get("thinking") or data.get("signature"):
                yield ReasoningDelta(data.get("thinking") or "", signature=data.get("signature") or None)
        return
    text = fields.get("reasoning_content")
    if text:
        yield ReasoningDelta(text)


def _provider_blocks(fields: dict[str, Any], seen: dict[str, int]) -> Iterable[ProviderBlock]:
    """Anthropic server-tool blocks: LiteLLM re-sends cumulative lists, so emit only new entries."""
    for key in _ANTHROPIC_BLOCK_KEYS:
        entries = fields.get(key)
        if not isinstance(entries, list):
            continue
        for entry in entries[seen.get(key, 0) :]:
            yield ProviderBlock(_as_block(key, entry))
        seen[key] = len(entries)


def _as_block(key: str, entry: Any) -> dict[str, Any]:
    data = entry if isinstance(entry, dict) else dict(entry)
    if key != "server_tool_calls":
        return dict(data)

    function = data.get("function") or {}
    arguments = streamed_input([function.get("arguments") or "{}"])
    return {"type": "server_tool_use", "id": data.get("id"), "name": function.get("name"), "input": arguments}
