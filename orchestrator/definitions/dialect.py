"""A JSON schema -> the form each model provider takes, and the one rule for OpenAI's strict mode.

Every schema a model is offered goes through `dialect_schema`: a tool's
arguments (from its pydantic model, `schema.tool_parameters`), an MCP server's
tool (its `inputSchema`, `mcp/tools.py`) and, next, a typed output. So one
schema gives one answer everywhere, and `strict_notes` is the only judge of
whether OpenAI's strict mode can take it.

The generic passes make a schema self-contained and plain: `$ref`s inlined
(`#/$defs/...` and `#/definitions/...`; a reference that loops or points
elsewhere becomes "any value"), titles dropped, `const` as a one-value enum,
`oneOf` as `anyOf`, a list of types as an `anyOf`. Then a pass per dialect:

- ``openai``: strict mode. Every object lists all its properties in
  `required` and has `additionalProperties: false`; a property that may be
  omitted becomes nullable, and its default moves into the description
  (strict mode rejects `default`). `drop_null_optionals` (or, for a pydantic
  model, `schema.drop_null_defaults`) undoes that on the arguments a model
  sends. A record or a free-form value cannot be expressed in strict mode, so
  such a schema is sent with `strict: false` (`strict_notes` says why) and the
  value's schema allows any object (`additionalProperties: true`) or any JSON
  value (`{}`).
- ``anthropic``: the standard JSON schema Claude takes as `input_schema`
  (optional properties stay optional, defaults stay).
- ``gemini``: the OpenAPI 3.0 subset of function declarations: no `$ref`,
  no `additionalProperties`, no `const`, `nullable: true` instead of a null
  branch; enums are strings, so an integer enum becomes an integer whose
  values are listed in the description. A record (or an enum mixing types)
  cannot be said in it: refused with the field's path, or with `loose=True`
  (a schema the user does not own, such as an MCP server's) widened to any
  object (or the values listed in the description). A free-form object is
  `type: object` without `properties` (what LiteLLM also sends for an empty
  object: Gemini rejects `properties: {}` and `additionalProperties`); any
  JSON value is an `anyOf` of the five typed forms, each `nullable`, since an
  empty schema would become an object.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from orchestrator.definitions.arg_types import SchemaError, join_path

# One JSON schema node. Its values are whatever JSON holds (nested nodes, lists, enum values), so they stay `Any`.
JsonSchema = dict[str, Any]

__all__ = [
    "DIALECTS",
    "JsonSchema",
    "dialect_schema",
    "drop_null_optionals",
    "function_spec",
    "is_strict_compatible",
    "strict_notes",
]

DIALECTS: tuple[str, ...] = ("openai", "anthropic", "gemini")


def dialect_schema(schema: JsonSchema, dialect: str, *, path: str = "", loose: bool = False) -> JsonSchema:
    """`schema` in `dialect`'s form; `path` names it in errors, `loose` widens what Gemini cannot say."""
    transform = _dialect(dialect)
    return _ordered(transform(_plain(_inline_refs(schema)), path, loose))


def function_spec(
    name: str, description: str, parameters: JsonSchema, dialect: str, *, path: str = "", loose: bool = False
) -> JsonSchema:
    """The OpenAI-format tool dict LiteLLM takes, `parameters` (an arguments object) in `dialect`'s form.

    LiteLLM turns it into Anthropic's `input_schema` or Gemini's function declaration
    itself; the dialect decides what the schema may contain (`path`, `loose`: as `dialect_schema`).
    """
    params = dialect_schema({**parameters, "type": "object"}, dialect, path=path, loose=loose)
    function: dict[str, Any] = {"name": name, "description": description, "parameters": params}
    if dialect == "openai":
        function["strict"] = not strict_notes(params)
    return {"type": "function", "function": function}


def is_strict_compatible(schema: JsonSchema) -> bool:
    """True when OpenAI strict mode can take `schema` as it stands (see `strict_notes`)."""
    return not strict_notes(schema)


def strict_notes(schema: JsonSchema, path: str = "") -> list[str]:
    """Why OpenAI strict mode cannot take `schema` as it stands, one `path: reason` each; empty when it can.

    Strict mode needs every value typed and every object closed with all its
    properties required. `dialect_schema(..., "openai")` makes every object so
    where it can; a record, a free-form object and an any-JSON value are what
    it cannot, and each turns strict mode off for the whole tool (the tool is
    still sent, with `strict: false`). Asked of a schema that did not go through
    the dialect (an MCP server's as it listed it), the rule is the same.
    """
    where = path or "(arguments)"
    if _is_any(schema):
        return [f"{where}: any JSON value (Any / JsonValue) has no type strict mode can check"]
    notes: list[str] = []
    if schema.get("type") == "object" or "properties" in schema:
        notes += _object_notes(schema, path)
    for name, sub in schema.get("properties", {}).items():
        notes += strict_notes(sub, join_path(path, name))
    for sub in schema.get("anyOf", []):
        notes += strict_notes(sub, path)
    if isinstance(schema.get("items"), dict):
        notes += strict_notes(schema["items"], f"{path}[]")
    return list(dict.fromkeys(notes))


def _object_notes(schema: JsonSchema, path: str) -> list[str]:
    where = path or "(arguments)"
    extra = schema.get("additionalProperties")
    properties = schema.get("properties") or {}
    notes: list[str] = []
    if isinstance(extra, dict):
        notes.append(f"{where}: a record (dict[str, T]) has keys strict mode cannot name")
        notes += strict_notes(extra, f"{path}[]")
    elif extra is not False and not properties:
        notes.append(f"{where}: a free-form object (dict[str, Any]) has keys strict mode cannot name")
    elif extra is not False:
        notes.append(f"{where}: an object open to more keys than its properties (additionalProperties is not false)")
    optional = [name for name in properties if name not in set(schema.get("required") or [])]
    if optional:
        notes.append(f"{where}: optional properties ({', '.join(optional)}); strict mode requires every property")
    return notes


def drop_null_optionals(schema: JsonSchema, data: Any) -> Any:
    """Undo the openai dialect's nullable-optional trick on arguments, by the schema they were defined with.

    `dialect_schema(schema, "openai")` makes an optional property required and
    nullable; a model that sends `null` for it means "leave it out". A property
    whose own schema admits null keeps its null. (`schema.drop_null_defaults`
    does the same from a pydantic model.)
    """
    return _drop_nulls(_plain(_inline_refs(schema)), data)


def _drop_nulls(node: JsonSchema, value: Any) -> Any:
    if isinstance(value, dict) and (isinstance(node.get("properties"), dict) or "additionalProperties" in node):
        properties: JsonSchema = node.get("properties") or {}
        extra = node.get("additionalProperties")
        required = set(node.get("required") or [])
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is None:
                out[key] = item
            elif not (item is None and key in properties and key not in required and not _admits_null(sub)):
                out[key] = _drop_nulls(sub, item)
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_drop_nulls(node["items"], item) for item in value]
    for member in node.get("anyOf", []):  # the first member that can hold the value decides
        if isinstance(value, dict) and set(value) <= set(member.get("properties") or {}):
            return _drop_nulls(member, value)
        if isinstance(value, list) and isinstance(member.get("items"), dict):
            return _drop_nulls(member, value)
    return value


def _admits_null(node: JsonSchema) -> bool:
    if node.get("type") == "null" or node.get("nullable") is True or _is_any(node):
        return True
    return None in (node.get("enum") or []) or any(_admits_null(m) for m in node.get("anyOf", []))


# --------------------------------------------------------------------------
# shared passes
# --------------------------------------------------------------------------

_SCHEMA_ONE = ("items", "additionalProperties", "not")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties")
_TYPED_KEYWORDS = ("type", "anyOf", "oneOf", "allOf", "enum", "const", "properties", "items", "$ref", "not")


def _is_any(node: Any) -> bool:
    """A schema that says nothing of the value's type: `Any` or `JsonValue` (`{}` + notes)."""
    return isinstance(node, dict) and not any(key in node for key in _TYPED_KEYWORDS)


def _inline_refs(schema: JsonSchema) -> JsonSchema:
    """Replace every `$ref` with a copy of its definition; keywords beside it win.

    A pydantic model that refers to itself is refused before it gets here; in
    any other schema, a reference met again inside itself (or one to outside the
    document) is dropped, so what it stood for reads as any value.
    """
    tables = {"#/$defs/": schema.get("$defs"), "#/definitions/": schema.get("definitions")}

    def target(ref: str) -> Any:
        for prefix, table in tables.items():
            if ref.startswith(prefix) and isinstance(table, dict):
                return table.get(ref.removeprefix(prefix))
        return None

    def node_of(node: JsonSchema, seen: frozenset[str]) -> JsonSchema:
        ref = node.get("$ref")
        if isinstance(ref, str):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            found = target(ref)
            if isinstance(found, dict) and ref not in seen:
                return node_of({**copy.deepcopy(found), **rest}, seen | {ref})
            node = rest
        out: JsonSchema = {}
        for key, value in node.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {n: node_of(s, seen) if isinstance(s, dict) else s for n, s in value.items()}
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                out[key] = [node_of(s, seen) if isinstance(s, dict) else s for s in value]
            elif key in _SCHEMA_ONE and isinstance(value, dict):
                out[key] = node_of(value, seen)
            else:
                out[key] = value
        return out

    return node_of({k: v for k, v in schema.items() if k not in ("$defs", "definitions")}, frozenset())


def _plain(node: JsonSchema) -> JsonSchema:
    """Drop titles; spell `const`, `oneOf`, one-item `allOf`, a list of types and a typeless object plainly."""
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node["allOf"][0], **{k: v for k, v in node.items() if k != "allOf"}}
    if isinstance(node.get("type"), list) and "anyOf" not in node and "oneOf" not in node:
        node = _split_types(node)
    if "properties" in node and "type" not in node and "anyOf" not in node:
        node = {"type": "object", **node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "discriminator", "$schema", "$id", "$comment"):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _plain(sub) for name, sub in value.items()}
        elif key in ("anyOf", "oneOf") and isinstance(value, list):
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


_NOTES = ("description", "default", "examples", "title")


def _split_types(node: JsonSchema) -> JsonSchema:
    """`type: [string, null]` as an `anyOf`, the form every dialect pass reads (Gemini takes one type name)."""
    kinds = [t for t in node["type"] if isinstance(t, str)]
    if len(kinds) == 1:
        return {**node, "type": kinds[0]}
    shared = {k: v for k, v in node.items() if k in _NOTES}
    checks = {k: v for k, v in node.items() if k not in _NOTES and k != "type"}
    members = [{"type": "null"} if t == "null" else {**checks, "type": t} for t in kinds]
    return {**shared, "anyOf": members}


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


def _dialect(dialect: str) -> Callable[[JsonSchema, str, bool], JsonSchema]:
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


def _openai(node: JsonSchema, path: str, loose: bool = False) -> JsonSchema:
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


def _anthropic(node: JsonSchema, path: str, loose: bool = False) -> JsonSchema:
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
    "example",
    "anyOf",
    "propertyOrdering",
    "items",
    "minimum",
    "maximum",
}
_GEMINI_FORMATS = {"string": {"date-time", "enum"}, "number": {"float", "double"}, "integer": {"int32", "int64"}}


_GEMINI_JSON: list[JsonSchema] = [{"type": t, "nullable": True} for t in ("string", "number", "boolean", "object")]
_GEMINI_ANY: list[JsonSchema] = [*_GEMINI_JSON, {"type": "array", "items": {"anyOf": _GEMINI_JSON}, "nullable": True}]


def _gemini(node: JsonSchema, path: str, loose: bool = False) -> JsonSchema:
    node = _with_default_note(node, note_null=False)
    if _is_any(node):  # LiteLLM would make a typeless schema an object: list every JSON form
        notes = {k: v for k, v in node.items() if k == "description"}
        return {"anyOf": [{**copy.deepcopy(m), **notes} for m in _GEMINI_ANY]}
    if "anyOf" in node:
        return _gemini_union(node, path, loose)
    if node.get("additionalProperties") is True and not node.get("properties"):
        return {k: v for k, v in node.items() if k in ("type", "description", "nullable")}  # any object
    if isinstance(node.get("additionalProperties"), dict):
        if loose and not node.get("properties"):  # the closest Gemini can say: any object
            return {"type": "object", **{k: v for k, v in node.items() if k in ("description", "nullable")}}
        if not loose:
            raise SchemaError(
                f"{path}: Gemini cannot take a record (dict[str, T]); "
                "use a list of key/value objects or a model with named fields"
            )
    out = {k: v for k, v in node.items() if k in _GEMINI_KEYWORDS}  # loose: named properties kept, the rest dropped
    if "enum" in out:
        out = _gemini_enum(out, path, loose)
        if "enum" not in out and "type" not in out:
            return _gemini(out, path, loose)  # values of mixed types, listed in the description: any value
    if out.get("format") not in _GEMINI_FORMATS.get(out.get("type", ""), set()):
        out.pop("format", None)
    if "properties" in out:
        out["properties"] = {n: _gemini(s, join_path(path, n), loose) for n, s in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _gemini(out["items"], f"{path}[]", loose)
    return out


def _gemini_enum(node: JsonSchema, path: str, loose: bool) -> JsonSchema:
    """Gemini enums are strings; other values become their type, listed in the description.

    Values of mixed types are refused, or with `loose` listed in the description of a value of any type.
    """
    values = node["enum"]
    if all(isinstance(v, str) for v in values):
        return {**node, "type": "string"}
    kinds = {"boolean" if isinstance(v, bool) else "integer" if isinstance(v, int) else "number" for v in values}
    mixed = len(kinds) != 1 or any(v is None or isinstance(v, str | list | dict) for v in values)
    if mixed and not loose:
        raise SchemaError(f"{path}: Gemini enums take strings only, got {values!r}")
    note = "One of: " + ", ".join(json.dumps(v) for v in values) + "."
    desc = (node.get("description") or "").rstrip()
    out = {k: v for k, v in node.items() if k not in ("enum", "type")}
    out["description"] = f"{desc} {note}" if desc else note
    return out if mixed else {"type": kinds.pop(), **out}


def _gemini_union(node: JsonSchema, path: str, loose: bool) -> JsonSchema:
    """Gemini takes nothing beside `anyOf` (LiteLLM drops it too), so notes go into each member."""
    members = [m for m in node["anyOf"] if m.get("type") != "null"]
    nullable = len(members) < len(node["anyOf"])
    outer = {k: v for k, v in node.items() if k not in ("anyOf", "type")}
    if len(members) == 1:
        out = _gemini({**members[0], **outer}, path, loose)
    else:  # only notes are shared: `outer` says nothing of the type, and read alone it would be "any value"
        shared = {k: v for k, v in outer.items() if k == "description"}
        out = {"anyOf": [{**_gemini(m, path, loose), **shared} for m in members]}
    return _gemini_nullable(out) if nullable else out


def _gemini_nullable(node: JsonSchema) -> JsonSchema:
    if "anyOf" in node:
        return {"anyOf": [{**m, "nullable": True} for m in node["anyOf"]]}
    return {**node, "nullable": True}
