"""LiteLLM's stream chunks to the runtime's neutral items (the `stream: litellm` path).

Everything provider-specific in a LiteLLM delta is read here: text, reasoning
(`reasoning_content`, or Anthropic `thinking_blocks` with their signatures), tool
calls (a Gemini thought signature packed into the id is split back out), and, where
the tap does not read the raw events, the Anthropic server-tool blocks LiteLLM keeps
in `provider_specific_fields`. `tap_for` chooses the raw-event tap for a response;
`ended_despite` decides what an exception LiteLLM raised at a stream's end means.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from providers import model_json
from providers.call_ids import split_signature
from providers.litellm_tap import RawTap
from providers.openai_wire import inband_error
from providers.stream import ModelInfo, ProviderBlock, ReasoningDelta, StreamItem, TextDelta, ToolCallDelta

__all__ = ["delta_items", "ended_despite", "tap_for"]

_ANTHROPIC_BLOCK_KEYS = ("server_tool_calls", "web_search_results", "tool_results")

_TAPPED = frozenset({"anthropic", "gemini", "vertex_ai"})


def tap_for(info: ModelInfo, wrapper: Any) -> RawTap | None:
    """A tap on the events under LiteLLM's wrapper, for the stream shapes `RawTap` knows."""
    inner = getattr(wrapper, "completion_stream", None)
    if info.provider_type in _TAPPED and info.dialect in ("anthropic", "gemini"):
        family = info.dialect
    elif callable(getattr(inner, "_iter_events", None)):
        family = "openai"  # the openai SDK's stream: OpenAI-compatible providers on LiteLLM's path
    elif info.dialect == "openai" and (callable(getattr(inner, "chunk_parser", None)) or inner is None):
        family = "openai_like"  # LiteLLM's own iterator over OpenAI-shaped chunks (Groq, ...): errors only
    else:
        return None
    tap = RawTap(family)
    tap.install(wrapper)
    return tap if tap.installed else None


def ended_despite(tap: RawTap | None, exc: Exception) -> bool:
    """LiteLLM raised at the end of a stream: an in-band error is mapped by its own status; a stream
    that ended with `[DONE]` (Snowflake Cortex sends no finish_reason) is a finished answer."""
    if tap is None:
        return False
    if tap.error is not None:
        raise inband_error(tap.error, model=_bare_model(exc)) from None
    return tap.done and "finish_reason" in str(exc)


def _bare_model(exc: Exception) -> str:
    return str(getattr(exc, "model", None) or "")


def delta_items(delta: Any, seen_blocks: dict[str, int] | None) -> Iterable[StreamItem]:
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
    try:
        arguments = model_json.loads(function.get("arguments") or "{}")
    except ValueError:
        arguments = {"_raw": function.get("arguments")}
    return {"type": "server_tool_use", "id": data.get("id"), "name": function.get("name"), "input": arguments}
