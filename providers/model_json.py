"""JSON a model wrote (tool arguments, a server tool's input, a judge's verdict), parsed with its nesting bounded.

`json.loads` recurses once per level of lists and objects: some 1,000 levels (2 KB of brackets)
raise `RecursionError`, which is no `ValueError`, so the `except ValueError` around a parse let it
through, and a tool call's arguments broke the step, then every resume of it. Whatever reads a
parsed value next (pydantic, `json.dumps`, LiteLLM's transforms) recurses as deeply again. So text
nesting deeper than `MAX_DEPTH` is refused before it is parsed, with a `ValueError` naming the
limit that the caller turns into an answer the model can correct.

The check costs two `str.count` calls for text with few brackets (nearly every argument); only
text holding more brackets than the limit is scanned, with its strings cut out by one regex.
"""

from __future__ import annotations

import json
import re
from typing import Any

from providers.text import clean_value, may_hold_surrogates

__all__ = ["MAX_DEPTH", "TooDeep", "depth_problem", "loads"]

MAX_DEPTH = 64
"""Levels of lists and objects a model's JSON may nest: far past any tool's schema, well inside what
`json`, pydantic and LiteLLM handle (the server's stored values have the same limit)."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class TooDeep(ValueError):
    """The text nests deeper than `MAX_DEPTH` levels: refused unparsed."""


def depth_problem(text: str, limit: int = MAX_DEPTH) -> str | None:
    """What is wrong with `text`'s nesting, or None when it stays within `limit` levels."""
    if text.count("[") + text.count("{") <= limit:
        return None
    depth = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            return f"nests deeper than {limit} levels of lists and objects"
    return None


def loads(text: str, limit: int = MAX_DEPTH) -> Any:
    """`json.loads(text)`, refusing text nested deeper than `limit` with `TooDeep` (a `ValueError`)."""
    problem = depth_problem(text, limit)
    if problem is not None:
        raise TooDeep(problem)
    try:
        value = json.loads(text)
    except RecursionError:  # within the limit, but called from a stack already deep
        raise TooDeep(f"nests too deeply to parse here (the limit is {limit} levels)") from None
    return clean_value(value) if may_hold_surrogates(text) else value
