"""Pydantic argument models -> JSON schemas for tools, in each provider's dialect.

Two jobs, both about the shape of a tool's arguments (the first in `arg_types.py`,
re-exported here):

1. `check_args_model` refuses, when a tool is *defined*, any argument type a
   model provider cannot take, so the mistake surfaces at import (and in
   `orchestrator check`) instead of as a 400 in the middle of a conversation.
   Supported: `str`, `int`, `float`, `bool`, `Literal[...]`, `Enum` (string or
   integer values), `list[T]`, nested `BaseModel`s, `dict[str, T]` (a record),
   unions, `Optional`/nullable and defaults; descriptions are kept. Free-form
   JSON too: `Any`, `pydantic.JsonValue`, `dict[str, Any]` / `dict` (any
   object) and `list[Any]` / `list` (any array), at any depth; the value a
   model sends reaches `execute` as parsed JSON, untouched. Nesting is counted
   in containers: the args object is level 1 and every nested object, list or
   record adds one; 7 levels are accepted, 8 refused.

   Refused, with the field's dotted path (`filters.since`, list items as `[]`):
   `bytes`, `datetime`/`date`/`time`/`timedelta` (models only produce text, so
   a date is a string: declare `str` with
   `Field(json_schema_extra={"format": "date-time"})` and parse it in
   `execute`), `set`/`frozenset`/`tuple` (use `list[T]`), arbitrary classes,
   and recursive models.

2. `tool_parameters` / `tool_spec` derive the JSON schema sent to a model:
   pydantic's own JSON schema of the model, put into each provider's dialect
   by `dialect.dialect_schema`, the one pass every offered schema goes through
   (MCP tools' too). In the ``openai`` dialect a field that may be omitted is
   required and nullable: call `drop_null_defaults` on the arguments a model
   sends before validating them. `strict_notes` (from `dialect.py`) says why a
   tool goes with `strict: false` (a record or a free-form value).
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from orchestrator.definitions.arg_types import MAX_DEPTH, SchemaError, check_args_model, is_plain_string_field
from orchestrator.definitions.dialect import (
    DIALECTS,
    JsonSchema,
    dialect_schema,
    function_spec,
    is_strict_compatible,
    strict_notes,
)

__all__ = [
    "DIALECTS",
    "JsonSchema",
    "MAX_DEPTH",
    "SchemaError",
    "check_args_model",
    "drop_null_defaults",
    "is_plain_string_field",
    "is_strict_compatible",
    "native_tool_spec",
    "strict_notes",
    "tool_parameters",
    "tool_spec",
]


def _model_schema(model: type[BaseModel] | None) -> JsonSchema:
    if model is None:
        return {"type": "object", "properties": {}}
    return {**model.model_json_schema(), "type": "object"}


def tool_parameters(model: type[BaseModel] | None, dialect: str = "openai") -> JsonSchema:
    """The JSON schema of a tool's arguments object, in `dialect`'s form (errors name the model's fields)."""
    return dialect_schema(_model_schema(model), dialect, path=model.__name__ if model else "args")


def tool_spec(name: str, description: str, model: type[BaseModel] | None, dialect: str) -> JsonSchema:
    """The OpenAI-format tool dict LiteLLM takes; `parameters` is in `dialect`'s form (`dialect.function_spec`)."""
    return function_spec(name, description, _model_schema(model), dialect, path=model.__name__ if model else "args")


def native_tool_spec(name: str, description: str, model: type[BaseModel] | None, dialect: str) -> JsonSchema:
    """The tool as the provider's own API spells it (for listings and provider-native calls)."""
    if dialect == "anthropic":
        return {"name": name, "description": description, "input_schema": tool_parameters(model, dialect)}
    if dialect == "gemini":
        return {"name": name, "description": description, "parameters": tool_parameters(model, dialect)}
    return tool_spec(name, description, model, dialect)


def drop_null_defaults(model: type[BaseModel], data: Any) -> Any:
    """Undo strict mode's nullable-optional trick before validating a model's arguments.

    In the openai dialect a field with a default is required and nullable; a
    model that sends `null` for it means "use the default". A field whose own
    type admits None keeps its null.
    """
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    by_alias = {(f.alias or n): (n, f) for n, f in model.model_fields.items()}
    for key, value in data.items():
        _, field = by_alias.get(key, (key, None))
        if field is None:
            out[key] = value
            continue
        if value is None and not field.is_required() and not _admits_none(field.annotation):
            continue
        out[key] = _drop_in(field.annotation, value)
    return out


def _drop_in(tp: Any, value: Any) -> Any:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _drop_in(get_args(tp)[0], value)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return drop_null_defaults(tp, value)
    if origin in (Union, types.UnionType):
        return _drop_in_union(get_args(tp), value)
    if origin is list and isinstance(value, list):
        return [_drop_in(get_args(tp)[0], v) for v in value]
    if origin is dict and isinstance(value, dict):
        return {k: _drop_in(get_args(tp)[1], v) for k, v in value.items()}
    return value


def _drop_in_union(members: tuple[Any, ...], value: Any) -> Any:
    """Clean `value` for the first union member it then validates as; else leave it."""
    for member in members:
        cleaned = _drop_in(member, value)
        if cleaned is value:
            continue
        try:
            TypeAdapter(member).validate_python(cleaned)
        except ValidationError:
            continue
        return cleaned
    return value


def _admits_none(tp: Any) -> bool:
    if tp is None or tp is type(None):
        return True
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _admits_none(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return any(_admits_none(m) for m in get_args(tp))
    if origin is Literal:
        return None in get_args(tp)
    return False
