"""Model text as valid Unicode: a lone surrogate becomes U+FFFD, as a UTF-8 decoder would make it.

A provider's JSON may escape half of a surrogate pair (``"\\ud800"``): Python decodes that to a
string no UTF-8 text holds, so storing the step raised (SQLite and PostgreSQL alike), the thread
stayed ``running`` and every resume failed on the same text. What a model sends is cleaned where it
enters: each stream item in the client's loop (`clean_item`), and values parsed from the JSON a model
wrote (`clean_value`, from `model_json.loads`). ASCII text, nearly all of it, costs one `isascii`.
"""

from __future__ import annotations

import re
from typing import Any

from providers.stream import ProviderBlock, ReasoningDelta, RefusalDelta, StreamItem, TextDelta, ToolCallDelta

__all__ = ["clean", "clean_item", "clean_value", "may_hold_surrogates"]

_LONE = re.compile("[\ud800-\udfff]")  # valid pairs are one character once decoded: what is left is lone
_ESCAPED = re.compile(r"\\u[dD][89a-fA-F]")


def clean(text: str) -> str:
    return text if text.isascii() else _LONE.sub("\ufffd", text)


def may_hold_surrogates(json_text: str) -> bool:
    """Whether JSON text may decode to a lone surrogate (it escapes one, or holds one raw)."""
    return not json_text.isascii() or ("\\u" in json_text and _ESCAPED.search(json_text) is not None)


def clean_value(value: Any) -> Any:
    """`value` (parsed JSON) with every string cleaned, keys included."""
    if isinstance(value, str):
        return _LONE.sub("\ufffd", value)
    if isinstance(value, list):
        return [clean_value(item) for item in value]
    if isinstance(value, dict):
        return {clean_value(key): clean_value(item) for key, item in value.items()}
    return value


def clean_item(item: StreamItem) -> None:
    """Clean one stream item's text in place (the items are the client's own, made per chunk)."""
    if isinstance(item, TextDelta | RefusalDelta):
        item.text = clean(item.text)
    elif isinstance(item, ToolCallDelta):
        item.arguments = clean(item.arguments)
        if item.name is not None:
            item.name = clean(item.name)
    elif isinstance(item, ReasoningDelta):
        item.text = clean(item.text)
    elif isinstance(item, ProviderBlock):
        item.block = clean_value(item.block)
