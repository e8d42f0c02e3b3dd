"""What each side sees: one request's messages, built from one snapshot.

Rules (SPEC): a side's own messages keep their roles; the other side's text
arrives as `user` messages; the other side's tool calls and results are not
shown; injected messages (no side) are shown to both. The result passes
through the `prefilter_llm_history` hook.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.core.messages import Message, SideName, ToolCall
from providers import model_json

#: Sent when a side would otherwise open with no user message (the first turn
#: of a dual_ai conversation): most providers refuse a request without one.
OPENING_MESSAGE = "(The conversation starts now. Please begin.)"


class _KeepMissing(dict[str, Any]):  # format_map helper: unknown {placeholders} stay as written
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def render_prompt(template: str, variables: Mapping[str, Any]) -> str:
    """Fill `{name}` placeholders from prompt variables and thread arguments.

    Unknown placeholders and stray braces are left as written, so a prompt
    with JSON examples in it renders unchanged."""
    values = _KeepMissing({k: v if isinstance(v, str) else json.dumps(v) for k, v in variables.items()})
    try:
        return string.Formatter().vformat(template, (), values)
    except (ValueError, IndexError, AttributeError, KeyError):
        return template


def side_view(
    side: SideName,
    history: Sequence[Message],
    system_prompt: str,
    *,
    depth: int = 0,
    image_input: bool = False,
    attachment_data: Mapping[str, str] | None = None,
    family: str | None = None,
) -> list[dict[str, Any]]:
    """Provider-format messages for `side` at `depth` (OpenAI chat format, as LiteLLM takes).

    The result is always a request providers accept: each assistant message
    with tool calls is followed at once by one answer per call (results are
    stored as they finish, so an injected message may sit between them in
    storage); tools queued by a call are shown as calls of the same message;
    empty assistant turns are left out; unparseable arguments are sent as
    `{}`; a call without a stored result (stopped, failed or crashed before it
    finished) is answered with a note. `family` is the LiteLLM provider family the
    request goes to: a side's own reasoning and call signatures go back to the family
    that made them (Anthropic thinking blocks with their signature; Gemini thought
    signatures) and to no other provider; the other side never sees them."""
    at_depth = [m for m in history if m.depth == depth]
    results = {m.tool_call_id: m for m in at_depth if m.role == "tool"}
    queued: dict[str, list[Message]] = {}
    for m in at_depth:
        if m.metadata.get("queued_by"):
            queued.setdefault(m.metadata["queued_by"], []).append(m)
    context = _Context(results, queued, image_input, attachment_data or {}, family)
    out: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for message in at_depth:
        if message.role == "tool" or message.metadata.get("queued_by"):
            continue  # shown right after the call they answer
        if message.side is None or message.side == side:
            out.extend(_own(message, context))
        elif message.metadata.get("output_correction"):
            continue  # a typed answer's correction is between the model and its side (engine/typed_output.py)
        elif message.content and message.role in ("assistant", "user"):
            out.append({"role": "user", "content": message.content})
    if not any(m["role"] == "user" for m in out):
        out.insert(1, {"role": "user", "content": OPENING_MESSAGE})
    return out


class _Context:
    def __init__(
        self,
        results: dict[str | None, Message],
        queued: dict[str, list[Message]],
        image_input: bool,
        attachment_data: Mapping[str, str],
        family: str | None = None,
    ) -> None:
        self.family = family
        self.results = results
        self.queued = queued
        self.image_input = image_input
        self.attachment_data = attachment_data


def _arguments(text: str) -> str:
    try:
        return text if isinstance(model_json.loads(text or "{}"), dict) else "{}"
    except ValueError:
        return "{}"


def _own(message: Message, context: _Context) -> list[dict[str, Any]]:
    if message.role == "assistant" and not message.content and not message.tool_calls and not message.provider_blocks:
        return []  # an empty response: providers refuse empty assistant turns
    entry: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.provider_blocks:
        entry["provider_specific_fields"] = _merge_blocks(message.provider_blocks)
    thinking = _thinking_blocks(message, context.family)
    if thinking:
        entry["thinking_blocks"] = thinking
    if message.role != "assistant" or not message.tool_calls:
        return [entry]
    calls = _with_queued(message.tool_calls, context)
    entry["tool_calls"] = [_call_entry(c, context.family) for c in calls]
    if not message.content:
        entry["content"] = None
    answers: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for call in calls:
        if call.provider_executed:
            continue  # the provider's own result blocks travel in provider_specific_fields
        result = context.results.get(call.id)
        if result is None:
            answers.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": f"Tool {call.name!r} did not finish (the execution was stopped).",
                }
            )
            continue
        answer, parts = _tool_result(result, context)
        answers.append(answer)
        images.extend(parts)
    if images:
        answers.append(
            {"role": "user", "content": [{"type": "text", "text": "Images returned by the tools above:"}, *images]}
        )
    return [entry, *answers]


_SIGNED_CALLS = frozenset({"gemini", "vertex_ai", "vertex_ai_beta"})


def _call_entry(call: ToolCall, family: str | None) -> dict[str, Any]:
    function = {"name": call.name, "arguments": _arguments(call.arguments)}
    entry: dict[str, Any] = {"id": call.id, "type": "function", "function": function}
    if call.signature and family in _SIGNED_CALLS:
        entry["provider_specific_fields"] = {"thought_signature": call.signature}  # LiteLLM's spelling for Gemini
    return entry


def _thinking_blocks(message: Message, family: str | None) -> list[dict[str, Any]]:
    """Signed thinking blocks of the same provider family, as LiteLLM sends them to Anthropic
    (required before a `tool_use` of the same turn when thinking is on)."""
    if not message.reasoning or family is None:
        return []
    return [
        {k: v for k, v in block.items() if k != "provider"}
        for block in message.reasoning
        if block.get("provider") == family and (block.get("signature") or block.get("type") == "redacted_thinking")
    ]


def _with_queued(calls: Sequence[ToolCall], context: _Context) -> list[ToolCall]:
    """The calls of a message plus, depth first, the tools they queued."""
    out: list[ToolCall] = []
    for call in calls:
        out.append(call)
        for announce in context.queued.get(call.id, []):
            out.extend(_with_queued(announce.tool_calls or [], context))
    return out


def _tool_result(message: Message, context: _Context) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    text = message.content or ""
    images = [a for a in message.attachments if a.mime_type.startswith("image/")]
    parts: list[dict[str, Any]] = []
    for a in images:
        data = context.attachment_data.get(a.id) if context.image_input else None
        if data is None:
            text += f"\n[attached file: {a.name} ({a.mime_type}, {a.size} bytes)]"
        else:
            parts.append({"type": "image_url", "image_url": {"url": f"data:{a.mime_type};base64,{data}"}})
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": text}, parts


def _merge_blocks(blocks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Stored provider blocks in the shape LiteLLM replays to the provider:
    server tool uses as `server_tool_calls`, web search results as
    `web_search_results`, other server tool results as `tool_results`; MCP connector
    blocks (`mcp_tool_use`, `mcp_tool_result`) and unknown block types verbatim, in order."""
    fields: dict[str, Any] = {}
    for block in blocks:
        kind = block.get("type")
        if kind == "server_tool_use":
            call = {
                "id": block.get("id"),
                "type": "function",
                "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input") or {})},
            }
            fields.setdefault("server_tool_calls", []).append(call)
        elif kind == "web_search_tool_result":
            fields.setdefault("web_search_results", []).append(block)
        elif isinstance(kind, str) and (kind.startswith("mcp_") or not kind.endswith("_tool_result")):
            # MCP connector pairs and block types LiteLLM does not know: the one list LiteLLM
            # replays verbatim into the assistant turn (ahead of its text and tool uses), in order
            fields.setdefault("compaction_blocks", []).append(block)
        elif isinstance(kind, str) and kind.endswith("_tool_result"):
            fields.setdefault("tool_results", []).append(block)
        else:
            for key, value in block.items():  # anything else: as the provider sent it
                if isinstance(value, list) and isinstance(fields.get(key), list):
                    fields[key] = fields[key] + value
                else:
                    fields[key] = value
    return fields
