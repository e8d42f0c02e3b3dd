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

2. `tool_parameters` / `tool_spec` derive the JSON schema sent to a model.
   There is one generator (pydantic's own JSON schema, with `$ref`s inlined and
   titles dropped) and a dialect pass for each provider where they differ:

   - ``openai``: strict mode. Every object lists all its properties in
     `required` and has `additionalProperties: false`; a field that may be
     omitted becomes nullable, and its default moves into the description
     (strict mode rejects `default`). Call `drop_null_defaults` on the
     arguments a model sends before validating them. A record or a free-form
     value cannot be expressed in strict mode, so a tool with one is sent with
     `strict: false` (`strict_notes` says why) and the value's schema allows
     any object (`additionalProperties: true`) or any JSON value (`{}`).
   - ``anthropic``: the standard JSON schema Claude takes as `input_schema`
     (optional fields stay optional, defaults stay).
   - ``gemini``: the OpenAPI 3.0 subset of function declarations: no `$ref`,
     no `additionalProperties`, no `const`, `nullable: true` instead of a null
     branch; enums are strings, so an integer enum becomes an integer whose
     values are listed in the description. A record (or an enum mixing
     types) cannot be said in it and is refused with the field's path. A
     free-form object is `type: object` without `properties` (what LiteLLM
     also sends for an empty object: Gemini rejects `properties: {}` and
     `additionalProperties`); any JSON value is an `anyOf` of the five typed
     forms, each `nullable`, since an empty schema would become an object.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from orchestrator.definitions.arg_types import (
    MAX_DEPTH,
    SchemaError,
    check_args_model,
    is_plain_string_field,
    join_path,
)

# One JSON schema node. Its values are whatever JSON holds (nested nodes, lists, enum values), so they stay `Any`.
JsonSchema = dict[str, Any]

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

DIALECTS: tuple[str, ...] = ("openai", "anthropic", "gemini")
# --------------------------------------------------------------------------
# the generator: one schema, then a dialect pass
# --------------------------------------------------------------------------


def tool_parameters(model: type[BaseModel] | None, dialect: str = "openai") -> JsonSchema:
    """The JSON schema of a tool's arguments object, in `dialect`'s form."""
    transform = _dialect(dialect)
    if model is None:
        return _ordered(transform({"type": "object", "properties": {}}, "args"))
    base = _plain(_inline_refs(model.model_json_schema()))
    return _ordered(transform({**base, "type": "object"}, model.__name__))


def tool_spec(name: str, description: str, model: type[BaseModel] | None, dialect: str) -> JsonSchema:
    """The OpenAI-format tool dict LiteLLM takes; `parameters` is in `dialect`'s form.

    LiteLLM turns this into Anthropic's `input_schema` or Gemini's function
    declaration itself; the dialect decides what the schema may contain.
    """
    params = tool_parameters(model, dialect)
    function: dict[str, Any] = {"name": name, "description": description, "parameters": params}
    if dialect == "openai":
        function["strict"] = not strict_notes(params)
    return {"type": "function", "function": function}


def native_tool_spec(name: str, description: str, model: type[BaseModel] | None, dialect: str) -> JsonSchema:
    """The tool as the provider's own API spells it (for listings and provider-native calls)."""
    if dialect == "anthropic":
        return {"name": name, "description": description, "input_schema": tool_parameters(model, dialect)}
    if dialect == "gemini":
        return {"name": name, "description": description, "parameters": tool_parameters(model, dialect)}
    return tool_spec(name, description, model, dialect)


def is_strict_compatible(schema: JsonSchema) -> bool:
    """True when OpenAI strict mode can take `schema`: every value typed, every object closed."""
    return not strict_notes(schema)


def strict_notes(schema: JsonSchema, path: str = "") -> list[str]:
    """Why OpenAI strict mode cannot take `schema`, one `path: reason` each; empty when it can.

    Strict mode needs every object's keys named and every value typed, so a
    record, a free-form object and an any-JSON value each turn it off for the
    whole tool (the tool is still sent, with `strict: false`).
    """
    where = path or "(arguments)"
    if _is_any(schema):
        return [f"{where}: any JSON value (Any / JsonValue) has no type strict mode can check"]
    notes: list[str] = []
    extra = schema.get("additionalProperties")
    if schema.get("type") == "object" and extra is not False:
        if isinstance(extra, dict):
            notes.append(f"{where}: a record (dict[str, T]) has keys strict mode cannot name")
            notes += strict_notes(extra, f"{path}[]")
        else:
            notes.append(f"{where}: a free-form object (dict[str, Any]) has keys strict mode cannot name")
    for name, sub in schema.get("properties", {}).items():
        notes += strict_notes(sub, join_path(path, name))
    for sub in schema.get("anyOf", []):
        notes += strict_notes(sub, path)
    if isinstance(schema.get("items"), dict):
        notes += strict_notes(schema["items"], f"{path}[]")
    return list(dict.fromkeys(notes))


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


# --------------------------------------------------------------------------
# shared passes
# --------------------------------------------------------------------------

_SCHEMA_ONE = ("items", "additionalProperties", "not")


_TYPED_KEYWORDS = ("type", "anyOf", "oneOf", "allOf", "enum", "const", "properties", "items", "$ref", "not")


def _is_any(node: Any) -> bool:
    """A schema that says nothing of the value's type: `Any` or `JsonValue` (`{}` + notes)."""
    return isinstance(node, dict) and not any(key in node for key in _TYPED_KEYWORDS)


def _inline_refs(schema: JsonSchema) -> JsonSchema:
    """Replace every `$ref` with a copy of its definition; keywords beside it win.

    Recursive models are refused earlier, so inlining always ends.
    """
    defs = schema.get("$defs", {})

    def resolve_node(node: JsonSchema) -> JsonSchema:
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return resolve_node(merged)
        return {k: resolve(v) for k, v in node.items() if k != "$defs"}

    def resolve(value: Any) -> Any:
        if isinstance(value, list):
            return [resolve(n) for n in value]
        if isinstance(value, dict):
            return resolve_node(value)
        return value

    return resolve_node(schema)


def _plain(node: JsonSchema) -> JsonSchema:
    """Drop pydantic's titles and spell `const`, `oneOf` and one-item `allOf` plainly."""
    out: dict[str, Any] = {}
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node["allOf"][0], **{k: v for k, v in node.items() if k != "allOf"}}
    for key, value in node.items():
        if key in ("title", "discriminator", "$schema"):
            continue
        if key == "properties":
            out[key] = {name: _plain(sub) for name, sub in value.items()}
        elif key in ("anyOf", "oneOf"):
            out["anyOf"] = [_plain(sub) for sub in value]
        elif key == "const":
            out["enum"] = [value]
        elif key == "additionalProperties" and _is_any(value):
            out[key] = True  # dict[str, JsonValue] is `dict[str, Any]`: any object
        elif isinstance(value, dict) and key in _SCHEMA_ONE:
            out[key] = _plain(value)
        else:
            out[key] = value
    return out


def _ordered(node: JsonSchema) -> JsonSchema:
    """`type` and `description` first in every node, so a listing reads top-down."""
    keys = [k for k in ("type", "description") if k in node]
    out: JsonSchema = {k: node[k] for k in keys}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _ordered(sub) for name, sub in value.items()}
        elif key == "anyOf":
            out[key] = [_ordered(sub) for sub in value]
        elif key in _SCHEMA_ONE and isinstance(value, dict):
            out[key] = _ordered(value)
        elif key not in out:
            out[key] = value
    return out


def _with_default_note(node: JsonSchema, note_null: bool) -> JsonSchema:
    """Move `default` into the description, for dialects that reject the keyword."""
    if "default" not in node:
        return node
    node = dict(node)
    default = node.pop("default")
    if default is None:
        return node
    note = f"Defaults to {json.dumps(default)}" + (" when null." if note_null else ".")
    desc = (node.get("description") or "").rstrip()
    if desc and desc[-1] not in ".!?":
        desc += "."
    node["description"] = f"{desc} {note}" if desc else note
    return node


def _dialect(dialect: str) -> Callable[[JsonSchema, str], JsonSchema]:
    table = {"openai": _openai, "anthropic": _anthropic, "gemini": _gemini}
    if dialect not in table:
        raise ValueError(f"unknown schema dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")
    return table[dialect]


# --------------------------------------------------------------------------
# openai: strict mode
# --------------------------------------------------------------------------

_OPENAI_KEYWORDS = {
    "type",
    "description",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "anyOf",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
}
_OPENAI_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}


def _openai(node: JsonSchema, path: str) -> JsonSchema:
    node = _with_default_note(node, note_null=True)
    out = {k: v for k, v in node.items() if k in _OPENAI_KEYWORDS}
    if out.get("format") not in _OPENAI_FORMATS:
        out.pop("format", None)
    if "anyOf" in out:
        out["anyOf"] = [_openai(sub, path) for sub in out["anyOf"]]
    if isinstance(out.get("items"), dict):
        out["items"] = _openai(out["items"], f"{path}[]")
    if out.get("type") == "object":
        out = _openai_object(out, path)
    return out


def _openai_object(node: JsonSchema, path: str) -> JsonSchema:
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and not node.get("properties"):
        node["additionalProperties"] = _openai(extra, f"{path}[]")  # a record: not strict-able
        return node
    if extra is True and not node.get("properties"):
        return {**node, "additionalProperties": True}  # a free-form object: not strict-able
    required = set(node.get("required", []))
    props = {}
    for name, sub in node.get("properties", {}).items():
        converted = _openai(sub, join_path(path, name))
        props[name] = converted if name in required else _nullable(converted)
    node.update(properties=props, required=list(props), additionalProperties=False)
    return node


def _nullable(node: JsonSchema) -> JsonSchema:
    if node.get("type") == "null" or _is_any(node):  # any JSON value already admits null
        return node
    if "anyOf" in node:
        if not any(sub.get("type") == "null" for sub in node["anyOf"]):
            node = {**node, "anyOf": [*node["anyOf"], {"type": "null"}]}
        return node
    inner = {k: v for k, v in node.items() if k != "description"}
    wrapped: dict[str, Any] = {"anyOf": [inner, {"type": "null"}]}
    if "description" in node:
        wrapped["description"] = node["description"]
    return wrapped


# --------------------------------------------------------------------------
# anthropic: standard JSON schema as input_schema
# --------------------------------------------------------------------------


def _anthropic(node: JsonSchema, path: str) -> JsonSchema:
    """Claude takes standard JSON schema; the generic passes already made it self-contained."""
    return node


# --------------------------------------------------------------------------
# gemini: the OpenAPI 3.0 subset of function declarations
# --------------------------------------------------------------------------

_GEMINI_KEYWORDS = {
    "type",
    "format",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "items",
    "minimum",
    "maximum",
}
_GEMINI_FORMATS = {"string": {"date-time", "enum"}, "number": {"float", "double"}, "integer": {"int32", "int64"}}


_GEMINI_JSON: list[JsonSchema] = [{"type": t, "nullable": True} for t in ("string", "number", "boolean", "object")]
_GEMINI_ANY: list[JsonSchema] = [*_GEMINI_JSON, {"type": "array", "items": {"anyOf": _GEMINI_JSON}, "nullable": True}]


def _gemini(node: JsonSchema, path: str) -> JsonSchema:
    node = _with_default_note(node, note_null=False)
    if _is_any(node):  # LiteLLM would make a typeless schema an object: list every JSON form
        notes = {k: v for k, v in node.items() if k == "description"}
        return {"anyOf": [{**copy.deepcopy(m), **notes} for m in _GEMINI_ANY]}
    if "anyOf" in node:
        return _gemini_union(node, path)
    if node.get("additionalProperties") is True and not node.get("properties"):
        return {k: v for k, v in node.items() if k in ("type", "description", "nullable")}  # any object
    if isinstance(node.get("additionalProperties"), dict):
        raise SchemaError(
            f"{path}: Gemini cannot take a record (dict[str, T]); "
            "use a list of key/value objects or a model with named fields"
        )
    out = {k: v for k, v in node.items() if k in _GEMINI_KEYWORDS}
    if "enum" in out:
        out = _gemini_enum(out, path)
    if out.get("format") not in _GEMINI_FORMATS.get(out.get("type", ""), set()):
        out.pop("format", None)
    if "properties" in out:
        out["properties"] = {n: _gemini(s, join_path(path, n)) for n, s in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _gemini(out["items"], f"{path}[]")
    return out


def _gemini_enum(node: JsonSchema, path: str) -> JsonSchema:
    """Gemini enums are strings; other values become their type, listed in the description."""
    values = node["enum"]
    if all(isinstance(v, str) for v in values):
        return {**node, "type": "string"}
    kinds = {"boolean" if isinstance(v, bool) else "integer" if isinstance(v, int) else "number" for v in values}
    if len(kinds) != 1 or any(v is None or isinstance(v, str) for v in values):
        raise SchemaError(f"{path}: Gemini enums take strings only, got {values!r}")
    note = "One of: " + ", ".join(json.dumps(v) for v in values) + "."
    desc = (node.get("description") or "").rstrip()
    out = {k: v for k, v in node.items() if k != "enum"}
    out.update(type=kinds.pop(), description=f"{desc} {note}" if desc else note)
    return out


def _gemini_union(node: JsonSchema, path: str) -> JsonSchema:
    """Gemini takes nothing beside `anyOf` (LiteLLM drops it too), so notes go into each member."""
    members = [m for m in node["anyOf"] if m.get("type") != "null"]
    nullable = len(members) < len(node["anyOf"])
    outer = {k: v for k, v in node.items() if k not in ("anyOf", "type")}
    if len(members) == 1:
        out = _gemini({**members[0], **outer}, path)
    else:  # only notes are shared: `outer` says nothing of the type, and read alone it would be "any value"
        shared = {k: v for k, v in outer.items() if k == "description"}
        out = {"anyOf": [{**_gemini(m, path), **shared} for m in members]}
    return _gemini_nullable(out) if nullable else out


def _gemini_nullable(node: JsonSchema) -> JsonSchema:
    if "anyOf" in node:
        return {"anyOf": [{**m, "nullable": True} for m in node["anyOf"]]}
    return {**node, "nullable": True}
