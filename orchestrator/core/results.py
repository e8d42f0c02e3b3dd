"""What a tool returns: `ToolResult` and its attachments.

These cross every boundary (tool -> executor -> storage -> model request), so
they are pydantic models with a stable JSON form.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PrivateAttr, TypeAdapter

_JSON_VALUE: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)


class ToolAttachment(BaseModel):
    """A file a tool hands back inline; the runtime stores it and keeps a ref."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="File name, e.g. 'generated.png'; no path.")
    mime_type: str
    data: str = Field(description="Base64-encoded file data.", repr=False)
    width: int | None = None
    height: int | None = None


class AttachmentRef(BaseModel):
    """A file already in the thread's file store."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    mime_type: str
    size: int
    width: int | None = None
    height: int | None = None


class ToolResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["success", "error"]
    result: str | None = None
    error: str | None = None
    stack: str | None = None
    attachments: list[ToolAttachment | AttachmentRef] | None = None
    # A structured result (a tool's pydantic model or dict, a typed prompt's value) in its JSON form, for
    # hooks and code; the model reads `result`, the same value as JSON text (`of_value`).
    value: JsonValue = None

    @classmethod
    def of_value(cls, value: object) -> ToolResult:
        """A success whose `result` is `value` as JSON text and `value` its JSON form: the one way a
        structured result is serialised (a tool returning a model or a dict, a typed prompt as a tool)."""
        data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        plain = _JSON_VALUE.validate_python(data)
        return cls(status="success", result=json.dumps(plain, ensure_ascii=False), value=plain)

    _deferred: bool = PrivateAttr(default=False)

    @classmethod
    def deferred(cls) -> ToolResult:
        """ "The result comes later, from outside" (PydanticAI's `CallDeferred`): the call waits,
        unanswered, until `thread.submit_result(call_id, result)`; the thread rests meanwhile."""
        marker = cls(status="success")
        marker._deferred = True
        return marker

    @property
    def is_deferred(self) -> bool:
        return self._deferred

    @classmethod
    def ok(cls, result: str | None = None, **kw: object) -> ToolResult:
        return cls(status="success", result=result, **kw)  # type: ignore[arg-type]

    @classmethod
    def fail(cls, error: str, stack: str | None = None) -> ToolResult:
        return cls(status="error", error=error, stack=stack)
