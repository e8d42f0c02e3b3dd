"""Argument models -> JSON schemas: the provider dialects, and the check's depth limit they share
(the refused types are in test_arg_types.py).

Each dialect is tested against the constraints its provider documents:
- OpenAI structured outputs (strict function calling), "Supported schemas":
  root is an object and not `anyOf`; every object sets
  `additionalProperties: false` and lists every property in `required`
  (optional fields are emulated as a union with null); only the documented
  keywords (no `default`, `allOf`, `oneOf`, `not`, `if`, ...); string formats
  from the documented list; at most 10 levels of nesting, 5000 properties and
  1000 enum values.
- Anthropic tool use: a tool is `name` (`^[a-zA-Z0-9_-]{1,64}$`), `description`
  and `input_schema`, a JSON Schema whose top-level type is `object`.
- Gemini function declarations: `parameters` is the OpenAPI 3.0 subset `Schema`
  (type, format, description, nullable, enum, properties, required, items,
  anyOf, min/max keywords, ...); no `$ref`/`$defs`, no `additionalProperties`,
  no `const`/`oneOf`/`allOf`; `type` is a single name; enums are strings;
  string formats only `date-time` and `enum`.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Literal, Optional

import jsonschema
import pytest
from pydantic import BaseModel, Field, create_model

from orchestrator.definitions.schema import (
    MAX_DEPTH,
    SchemaError,
    check_args_model,
    drop_null_defaults,
    is_plain_string_field,
    is_strict_compatible,
    native_tool_spec,
    tool_parameters,
    tool_spec,
)

# --------------------------------------------------------------------------
# models used throughout
# --------------------------------------------------------------------------


class Color(str, enum.Enum):  # noqa: UP042 - the classic spelling users write
    RED = "red"
    BLUE = "blue"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    """A postal address."""

    street: str = Field(description="Street and number")
    city: str


class Kitchen(BaseModel):
    """One of every supported type, with descriptions and defaults."""

    query: str = Field(description="Search query")
    limit: int = Field(default=10, description="Max results")
    ratio: float = 0.5
    exact: bool = Field(description="Exact match only")
    color: Color = Field(description="A color")
    priority: Priority = Priority.LOW
    mode: Literal["fast", "slow"] = "fast"
    kind: Literal["search"] = Field(description="Always 'search'")
    tags: list[str] = Field(default_factory=list, description="Tags")
    address: Address = Field(description="Where to ship")
    extra_addresses: list[Address] = []
    id_or_count: int | str = Field(description="An id or a count")
    note: Optional[str] = None  # noqa: UP045 - Optional is part of what is tested
    maybe: str | None = Field(description="Nullable but required")
    since: str = Field(
        default="2024-01-01T00:00:00Z",
        description="Start time",
        json_schema_extra={"format": "date-time"},
    )
    filters: Address | None = None


class Labels(BaseModel):
    labels: dict[str, int] = Field(description="Label -> weight")


def _chain(levels: int) -> type[BaseModel]:
    """A model with `levels` nested objects, the root counting as level 1."""
    model = create_model("L1", value=(str, ...))
    for depth in range(2, levels + 1):
        model = create_model(f"L{depth}", child=(model, Field(description=f"level {depth}")))
    return model


# --------------------------------------------------------------------------
# dialect validators: the documented constraints, as code
# --------------------------------------------------------------------------

_OPENAI_KEYWORDS = {
    "type",
    "description",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
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
    "$defs",
    "$ref",
}
_OPENAI_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
_JSON_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}


def assert_openai_strict(schema: dict) -> None:
    assert schema["type"] == "object" and "anyOf" not in schema, "root must be a plain object"
    counts = {"properties": 0, "enum": 0}

    def walk(node: dict, depth: int) -> None:
        assert depth <= 10, "more than 10 levels of nesting"
        unknown = set(node) - _OPENAI_KEYWORDS
        assert not unknown, f"keywords strict mode rejects: {unknown}"
        types = node.get("type")
        for t in types if isinstance(types, list) else [types] if types else []:
            assert t in _JSON_TYPES
        if "format" in node:
            assert node["format"] in _OPENAI_FORMATS
        if "enum" in node:
            counts["enum"] += len(node["enum"])
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, "objects must set additionalProperties: false"
            assert list(node["required"]) == list(node["properties"]), "every property must be required"
            counts["properties"] += len(node["properties"])
            for sub in node["properties"].values():
                walk(sub, depth + 1)
        if "items" in node:
            walk(node["items"], depth + 1)
        for sub in node.get("anyOf", []):
            walk(sub, depth)

    walk(schema, 1)
    assert counts["properties"] <= 5000 and counts["enum"] <= 1000
    jsonschema.Draft202012Validator.check_schema(schema)


def assert_anthropic_tool(tool: dict) -> None:
    assert set(tool) == {"name", "description", "input_schema"}
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["name"])
    schema = tool["input_schema"]
    assert schema["type"] == "object"
    assert "$ref" not in repr(schema), "the schema must be self-contained"
    jsonschema.Draft202012Validator.check_schema(schema)


_GEMINI_KEYWORDS = {
    "type",
    "format",
    "title",
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
    "default",
    "items",
    "minimum",
    "maximum",
}


def assert_gemini(schema: dict) -> None:
    def walk(node: dict) -> None:
        unknown = set(node) - _GEMINI_KEYWORDS
        assert not unknown, f"keywords outside Gemini's Schema: {unknown}"
        if "type" in node:
            assert isinstance(node["type"], str) and node["type"].upper() in {
                "STRING",
                "NUMBER",
                "INTEGER",
                "BOOLEAN",
                "ARRAY",
                "OBJECT",
            }
        if "enum" in node:
            assert node["type"] == "string" and all(isinstance(v, str) for v in node["enum"])
        if "format" in node and node.get("type") == "string":
            assert node["format"] in {"date-time", "enum"}
        if "required" in node:
            assert set(node["required"]) <= set(node["properties"])
        if "anyOf" in node:
            assert not set(node) - {"anyOf", "description", "nullable"}, f"a union with a type beside it: {node}"
        for sub in node.get("properties", {}).values():
            walk(sub)
        if "items" in node:
            walk(node["items"])
        for sub in node.get("anyOf", []):
            walk(sub)

    assert schema["type"] == "object"
    walk(schema)


def _gemini_as_json_schema(node: Any) -> Any:
    """Read a Gemini schema as JSON schema (nullable -> a null branch), to validate instances."""
    if isinstance(node, list):
        return [_gemini_as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _gemini_as_json_schema(v) for k, v in node.items() if k != "nullable"}
    if "properties" in node:
        out["properties"] = {k: _gemini_as_json_schema(v) for k, v in node["properties"].items()}
    return {"anyOf": [out, {"type": "null"}]} if node.get("nullable") else out


KITCHEN_SAMPLE = Kitchen(
    query="kettle",
    exact=True,
    color=Color.BLUE,
    kind="search",
    address=Address(street="1 Main St", city="Lisbon"),
    id_or_count=3,
    maybe=None,
)

# --------------------------------------------------------------------------
# supported types
# --------------------------------------------------------------------------


def test_every_supported_type_is_accepted() -> None:
    check_args_model(Kitchen)
    check_args_model(Labels)


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal["only"], {"type": "string", "enum": ["only"]}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (dict[str, bool], {"type": "object", "additionalProperties": {"type": "boolean"}}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (str | None, {"anyOf": [{"type": "string"}, {"type": "null"}]}),
        (Annotated[str, Field(min_length=2)], {"type": "string", "minLength": 2}),
    ],
)
def test_supported_type_maps_to_json_schema(annotation: Any, expected: dict) -> None:
    model = create_model("One", field=(annotation, ...))
    check_args_model(model)
    assert tool_parameters(model, "anthropic")["properties"]["field"] == expected


def test_nested_model_is_inlined_with_its_description() -> None:
    schema = tool_parameters(Kitchen, "anthropic")
    address = schema["properties"]["address"]
    assert address["type"] == "object"
    assert address["description"] == "Where to ship"  # the field's description wins over the docstring
    assert address["properties"]["street"] == {"type": "string", "description": "Street and number"}
    assert "$defs" not in schema and "$ref" not in repr(schema)


def test_descriptions_and_defaults_are_kept() -> None:
    props = tool_parameters(Kitchen, "anthropic")["properties"]
    assert props["query"]["description"] == "Search query"
    assert props["limit"] == {"type": "integer", "description": "Max results", "default": 10}
    assert props["since"]["format"] == "date-time"
    assert "title" not in _node_keys(tool_parameters(Kitchen, "anthropic"))  # pydantic's titles go


def _node_keys(node: dict) -> set[str]:
    """Every keyword used anywhere in a schema (property names excluded)."""
    keys = set(node)
    for sub in node.get("properties", {}).values():
        keys |= _node_keys(sub)
    for sub in node.get("anyOf", []):
        keys |= _node_keys(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            keys |= _node_keys(node[key])
    return keys


def test_datetime_with_declared_string_format_is_accepted() -> None:
    model = create_model("When", at=(str, Field(json_schema_extra={"format": "date-time"})))
    check_args_model(model)
    for dialect in ("openai", "anthropic", "gemini"):
        assert tool_parameters(model, dialect)["properties"]["at"]["format"] == "date-time"


# --------------------------------------------------------------------------
# nesting depth
# --------------------------------------------------------------------------


def test_seven_levels_accepted_eight_refused() -> None:
    assert MAX_DEPTH == 7
    check_args_model(_chain(7))
    with pytest.raises(SchemaError) as err:
        check_args_model(_chain(8))
    assert "L8." + ".".join(["child"] * 7) in str(err.value)
    assert "8 levels" in str(err.value)


def test_lists_and_records_count_as_levels() -> None:
    check_args_model(create_model("Ok", grid=(list[list[list[list[list[list[int]]]]]], ...)))
    deep = create_model("Deep", grid=(list[list[list[list[list[list[list[int]]]]]]], ...))
    with pytest.raises(SchemaError, match=r"Deep\.grid\[\]\[\]\[\]\[\]\[\]\[\]: nesting of 8 levels"):
        check_args_model(deep)
    records = create_model("Rec", r=(dict[str, dict[str, dict[str, dict[str, dict[str, dict[str, int]]]]]], ...))
    check_args_model(records)


def test_depth_seven_schema_fits_every_dialect() -> None:
    model = _chain(7)
    assert_openai_strict(tool_parameters(model, "openai"))
    assert_gemini(tool_parameters(model, "gemini"))
    assert_anthropic_tool(native_tool_spec("deep", "Deep", model, "anthropic"))


# --------------------------------------------------------------------------
# openai strict dialect
# --------------------------------------------------------------------------


def test_openai_strict_constraints_hold() -> None:
    schema = tool_parameters(Kitchen, "openai")
    assert_openai_strict(schema)
    assert is_strict_compatible(schema)


def test_openai_optional_fields_are_required_and_nullable() -> None:
    props = tool_parameters(Kitchen, "openai")["properties"]
    assert props["limit"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert props["limit"]["description"] == "Max results. Defaults to 10 when null."
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert props["query"] == {"type": "string", "description": "Search query"}  # required stays plain
    assert props["filters"]["anyOf"][0]["additionalProperties"] is False


def test_openai_tool_spec_shape() -> None:
    spec = tool_spec("search", "Search things", Kitchen, "openai")
    assert spec["type"] == "function"
    assert spec["function"]["name"] == "search"
    assert spec["function"]["description"] == "Search things"
    assert spec["function"]["strict"] is True
    assert_openai_strict(spec["function"]["parameters"])


def test_openai_instance_round_trip() -> None:
    """What a strict model sends (every key, nulls for omitted) validates back into the model."""
    schema = tool_parameters(Kitchen, "openai")
    sent = KITCHEN_SAMPLE.model_dump(mode="json")
    for key in ("limit", "ratio", "priority", "mode", "tags", "since", "extra_addresses"):
        sent[key] = None  # "use the default"
    jsonschema.validate(sent, schema)
    args = Kitchen.model_validate(drop_null_defaults(Kitchen, sent))
    assert args.limit == 10 and args.mode == "fast" and args.tags == [] and args.maybe is None


def test_drop_null_defaults_recurses_and_keeps_real_nulls() -> None:
    class Inner(BaseModel):
        n: int = 3

    class Outer(BaseModel):
        inner: Inner
        many: list[Inner]
        note: str | None = "x"

    data = {"inner": {"n": None}, "many": [{"n": None}], "note": None}
    assert drop_null_defaults(Outer, data) == {"inner": {}, "many": [{}], "note": None}


def test_openai_record_is_sent_without_strict() -> None:
    spec = tool_spec("label", "Label things", Labels, "openai")
    params = spec["function"]["parameters"]
    assert params["properties"]["labels"]["additionalProperties"] == {"type": "integer"}
    assert spec["function"]["strict"] is False
    assert not is_strict_compatible(params)


def test_openai_empty_args() -> None:
    params = tool_parameters(None, "openai")
    assert params == {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    assert tool_spec("now", "Time", None, "openai")["function"]["strict"] is True


# --------------------------------------------------------------------------
# anthropic dialect
# --------------------------------------------------------------------------


def test_anthropic_input_schema_constraints_hold() -> None:
    tool = native_tool_spec("kitchen_sink", "Everything", Kitchen, "anthropic")
    assert_anthropic_tool(tool)
    jsonschema.validate(KITCHEN_SAMPLE.model_dump(mode="json"), tool["input_schema"])


def test_anthropic_keeps_optional_fields_optional() -> None:
    schema = tool_parameters(Kitchen, "anthropic")
    assert "limit" not in schema["required"] and "query" in schema["required"]
    assert schema["properties"]["note"]["default"] is None


def test_anthropic_keeps_records() -> None:
    schema = tool_parameters(Labels, "anthropic")
    assert schema["properties"]["labels"]["additionalProperties"] == {"type": "integer"}


def test_tool_spec_for_litellm_is_openai_format_for_every_dialect() -> None:
    for dialect in ("anthropic", "gemini"):
        spec = tool_spec("search", "Search things", Kitchen, dialect)
        assert set(spec) == {"type", "function"}
        assert set(spec["function"]) == {"name", "description", "parameters"}


def test_empty_args_every_dialect() -> None:
    assert tool_parameters(None, "anthropic") == {"type": "object", "properties": {}}
    assert tool_parameters(None, "gemini") == {"type": "object", "properties": {}}


# --------------------------------------------------------------------------
# gemini dialect
# --------------------------------------------------------------------------


def test_gemini_subset_constraints_hold() -> None:
    schema = tool_parameters(Kitchen, "gemini")
    assert_gemini(schema)
    jsonschema.validate(KITCHEN_SAMPLE.model_dump(mode="json"), _gemini_as_json_schema(schema))


def test_gemini_nullable_and_defaults() -> None:
    props = tool_parameters(Kitchen, "gemini")["properties"]
    assert props["note"] == {"type": "string", "nullable": True}
    assert props["filters"]["nullable"] is True and props["filters"]["type"] == "object"
    assert props["limit"] == {"type": "integer", "description": "Max results. Defaults to 10."}
    assert props["kind"]["enum"] == ["search"]  # const spelled as a one-value enum


def test_gemini_union_members_keep_only_their_own_type() -> None:
    model = create_model("Args", key=(int | str, Field(description="Id or name.")), grid=(list[list[str]] | int, ...))
    props = tool_parameters(model, "gemini")["properties"]
    assert props["key"] == {
        "anyOf": [{"type": "integer", "description": "Id or name."}, {"type": "string", "description": "Id or name."}]
    }
    grid = {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
    assert props["grid"] == {"anyOf": [grid, {"type": "integer"}]}
    jsonschema.validate({"key": 3, "grid": [[]]}, _gemini_as_json_schema(tool_parameters(model, "gemini")))


def test_gemini_refuses_record_with_path() -> None:
    with pytest.raises(SchemaError, match=r"Labels\.labels: Gemini cannot take a record"):
        tool_parameters(Labels, "gemini")


def test_gemini_spells_integer_enum_as_integer_with_values() -> None:
    props = tool_parameters(Kitchen, "gemini")["properties"]
    assert props["priority"] == {"type": "integer", "description": "Defaults to 1. One of: 1, 2."}


def test_gemini_refuses_mixed_enum_with_path() -> None:
    model = create_model("Args", level=(Literal["low", 2], ...))
    check_args_model(model)  # fine for the other providers
    with pytest.raises(SchemaError, match=r"Args\.level: Gemini enums take strings only"):
        tool_parameters(model, "gemini")


def test_gemini_drops_formats_it_does_not_know() -> None:
    model = create_model("Args", mail=(str, Field(json_schema_extra={"format": "email"})))
    assert tool_parameters(model, "gemini")["properties"]["mail"] == {"type": "string"}
    assert tool_parameters(model, "openai")["properties"]["mail"]["format"] == "email"


def test_unknown_dialect() -> None:
    with pytest.raises(ValueError, match="unknown schema dialect 'mistral'"):
        tool_parameters(Kitchen, "mistral")


# --------------------------------------------------------------------------
# is_plain_string_field
# --------------------------------------------------------------------------


def test_is_plain_string_field() -> None:
    fields = Kitchen.model_fields
    assert is_plain_string_field(fields["query"])
    assert is_plain_string_field(fields["since"])
    assert not is_plain_string_field(fields["note"])  # Optional[str]
    assert not is_plain_string_field(fields["mode"])  # Literal
    assert not is_plain_string_field(fields["limit"])


# --------------------------------------------------------------------------
# unions pydantic spells with oneOf
# --------------------------------------------------------------------------


class Card(BaseModel):
    method: Literal["card"]
    number: str


class Transfer(BaseModel):
    method: Literal["transfer"]
    iban: str
    urgent: bool = False


class Payment(BaseModel):
    payment: Card | Transfer = Field(discriminator="method", description="How to pay")


def test_discriminated_union_becomes_plain_any_of() -> None:
    check_args_model(Payment)
    assert "oneOf" in repr(Payment.model_json_schema())  # what pydantic emits
    for dialect in ("openai", "anthropic", "gemini"):
        schema = tool_parameters(Payment, dialect)
        keys = _node_keys(schema)
        assert "oneOf" not in keys and "discriminator" not in keys and "$ref" not in keys
        assert len(schema["properties"]["payment"]["anyOf"]) == 2
    assert_openai_strict(tool_parameters(Payment, "openai"))
    assert_gemini(tool_parameters(Payment, "gemini"))
    sample = {"payment": {"method": "transfer", "iban": "PT50", "urgent": None}}
    jsonschema.validate(sample, tool_parameters(Payment, "openai"))
    args = Payment.model_validate(drop_null_defaults(Payment, sample))
    assert (args.payment.iban, args.payment.urgent) == ("PT50", False)  # type: ignore[union-attr]
