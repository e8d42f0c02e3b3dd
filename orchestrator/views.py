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

from .messages import Message, SideName

#: Sent when a side would otherwise open with no user message (the first turn
#: of a dual_ai conversation): most providers refuse a request without one.
OPENING_MESSAGE = "(The conversation starts now. Please begin.)"


class _KeepMissing(dict):  # format_map helper: unknown {placeholders} stay as written
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
) -> list[dict[str, Any]]:
    """Provider-format messages for `side` at `depth` (OpenAI chat format, as LiteLLM takes)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for message in history:
        if message.depth != depth:
            continue
        if message.side is None or message.side == side:
            out.extend(_own(message, image_input, attachment_data or {}))
        elif message.content and message.role in ("assistant", "user"):
            out.append({"role": "user", "content": message.content})
    if not any(m["role"] == "user" for m in out):
        out.insert(1, {"role": "user", "content": OPENING_MESSAGE})
    return out


def _own(message: Message, image_input: bool, attachment_data: Mapping[str, str]) -> list[dict[str, Any]]:
    if message.role == "tool":
        return _tool_result(message, image_input, attachment_data)
    entry: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.role == "assistant" and message.tool_calls:
        entry["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for c in message.tool_calls
        ]
        if not message.content:
            entry["content"] = None
    if message.provider_blocks:
        entry["provider_specific_fields"] = _merge_blocks(message.provider_blocks)
    return [entry]


def _tool_result(message: Message, image_input: bool, attachment_data: Mapping[str, str]) -> list[dict[str, Any]]:
    text = message.content or ""
    images = [a for a in message.attachments if a.mime_type.startswith("image/")]
    if images and not image_input:
        text += "".join(f"\n[attached file: {a.name} ({a.mime_type}, {a.size} bytes)]" for a in images)
    entries: list[dict[str, Any]] = [{"role": "tool", "tool_call_id": message.tool_call_id, "content": text}]
    if images and image_input:
        parts: list[dict[str, Any]] = [{"type": "text", "text": f"Images returned by tool {message.name}:"}]
        for a in images:
            data = attachment_data.get(a.id)
            if data is not None:
                parts.append({"type": "image_url", "image_url": {"url": f"data:{a.mime_type};base64,{data}"}})
        if len(parts) > 1:
            entries.append({"role": "user", "content": parts})
    return entries


def _merge_blocks(blocks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for block in blocks:
        for key, value in block.items():
            if isinstance(value, list) and isinstance(merged.get(key), list):
                merged[key] = merged[key] + value
            else:
                merged[key] = value
    return merged
