"""What a tool's return value becomes: the one result the model reads.

A tool may return a ToolResult, a dict of its shape, a pydantic model or any dict of JSON values; anything
else, text no storage can write (a lone surrogate) and attachments that are not what they claim all become
error results naming the tool and what was wrong, so the model can correct itself and the thread goes on.
"""

from __future__ import annotations

import base64
import binascii
import json
import traceback

from pydantic import BaseModel, ValidationError

from orchestrator.core.results import ToolAttachment, ToolResult
from orchestrator.core.validation import describe

__all__ = ["as_text", "coerce_result", "decode_attachment", "failed"]


def failed(name: str, exc: BaseException) -> ToolResult:
    """An exception from inside the tool, as an error result (the stack goes to metadata)."""
    return ToolResult.fail(f"Tool {name!r} failed: {type(exc).__name__}: {exc}", stack=traceback.format_exc())


def coerce_result(name: str, raw: object) -> ToolResult:
    """A ToolResult, a dict of its shape (it has a `status`), or a structured result: a pydantic model or
    any other dict, serialised once by `ToolResult.of_value`."""
    if isinstance(raw, ToolResult):
        return raw
    if isinstance(raw, dict) and "status" in raw:
        try:
            return ToolResult.model_validate(raw)
        except ValidationError as exc:
            problems = describe(exc)
            return ToolResult.fail(f"Tool {name!r} returned an invalid result: {problems}")
    if isinstance(raw, BaseModel | dict):
        try:
            return ToolResult.of_value(raw)
        except ValidationError as exc:
            return ToolResult.fail(f"Tool {name!r} returned a value that is not JSON: {describe(exc)}")
    return ToolResult.fail(
        f"Tool {name!r} returned {type(raw).__name__}; expected a ToolResult, a dict with 'status' and "
        "'result' or 'error', a pydantic model or a dict of JSON values"
    )


def as_text(name: str, result: ToolResult) -> ToolResult:
    """`result`, or an error result naming its fields that are not valid UTF-8 text.

    Why: a Python string may hold a lone surrogate (``'\\ud800'``, from a
    tool's own text or a sandboxed program's string), which no storage can
    write: storing it raised, and the thread was left running. The error shows
    what was returned with such characters escaped, so the model can act on it.
    """
    bad = [field for field, value in result.model_dump().items() if not _is_utf8(json.dumps(value, ensure_ascii=False))]
    if not bad:
        return result
    shown = _escaped(result.result if result.status == "success" else result.error) or ""
    return ToolResult.fail(
        f"Tool {name!r} returned text that is not valid UTF-8 (a lone surrogate, such as \\ud800) "
        f"in its {', '.join(bad)}; what it returned, escaped: {shown[:2000]}",
        stack=_escaped(result.stack),
    )


def _escaped(text: str | None) -> str | None:
    return None if text is None else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode_attachment(item: ToolAttachment, max_bytes: int) -> tuple[str | None, bytes]:
    if not item.name or "/" in item.name or "\\" in item.name or item.name in (".", "..") or "\x00" in item.name:
        return "the name must be a plain file name without a path", b""
    try:
        data = base64.b64decode(item.data, validate=True)
    except (binascii.Error, ValueError):
        return "data is not valid base64", b""
    if len(data) > max_bytes:
        return f"{len(data)} bytes is over the limit of {max_bytes} bytes", b""
    return None, data
