"""One schema, one answer: a local tool's arguments and an MCP server's tool go through the same dialect pass.

Before `definitions/dialect.py`, `schema.strict_notes` and the MCP module's own check disagreed (a schema with one
optional property, a property with no type) and the two Gemini passes kept different keywords and spelled integer
enums differently. Each case here compares the MCP tool's spec with a local tool's for the same arguments.
"""

from __future__ import annotations

import enum
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, Field
from test_schema import _gemini_as_json_schema, assert_gemini, assert_openai_strict

from orchestrator.definitions.arg_types import SchemaError
from orchestrator.definitions.define import ToolDefinition
from orchestrator.definitions.dialect import (
    DIALECTS,
    dialect_schema,
    drop_null_optionals,
    function_spec,
    strict_notes,
)
from orchestrator.definitions.schema import tool_spec
from orchestrator.mcp.tools import McpTool


async def _never(*_: Any) -> Any:
    raise AssertionError("not called")


def _mcp(schema: dict[str, Any]) -> McpTool:
    definition = ToolDefinition(name="t", description="T", execute=_never)
    return McpTool("srv", "t", "t", "T", schema, definition)


class WithDefault(BaseModel):
    greeting: str = "Hello"


class Untyped(BaseModel):
    value: Any = Field(description="Anything")


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Leveled(BaseModel):
    level: Level


OPTIONAL = {"type": "object", "properties": {"greeting": {"type": "string", "default": "Hello"}}}
UNTYPED = {"type": "object", "properties": {"value": {"description": "Anything"}}, "required": ["value"]}


def test_one_optional_property_one_answer() -> None:
    as_listed = {**OPTIONAL, "additionalProperties": False}
    assert strict_notes(as_listed) == [
        "(arguments): optional properties (greeting); strict mode requires every property"
    ]  # the schema as it stands is not strict; the openai dialect makes it so
    for dialect in DIALECTS:
        assert _mcp(OPTIONAL).spec(dialect) == tool_spec("t", "T", WithDefault, dialect)
    function = _mcp(OPTIONAL).spec("openai")["function"]
    assert function["strict"] is True
    assert_openai_strict(function["parameters"])


def test_a_property_with_no_type_is_not_strict_anywhere() -> None:
    for dialect in DIALECTS:
        assert _mcp(UNTYPED).spec(dialect) == tool_spec("t", "T", Untyped, dialect)
    assert _mcp(UNTYPED).spec("openai")["function"]["strict"] is False
    assert strict_notes({**UNTYPED, "additionalProperties": False}) == [
        "value: any JSON value (Any / JsonValue) has no type strict mode can check"
    ]


def test_gemini_one_keyword_set_and_integer_enums_stay_integers() -> None:
    listed = {
        "type": "object",
        "properties": {"level": {"$ref": "#/$defs/Level"}},
        "required": ["level"],
        "$defs": {"Level": {"enum": [1, 2], "type": "integer", "title": "Level"}},
    }
    mcp = _mcp(listed).spec("gemini")
    assert mcp == tool_spec("t", "T", Leveled, "gemini")
    assert mcp["function"]["parameters"]["properties"]["level"] == {"type": "integer", "description": "One of: 1, 2."}
    kept = {"type": "object", "properties": {"a": {"type": "object", "minProperties": 1, "propertyOrdering": ["x"]}}}
    assert dialect_schema(kept, "gemini")["properties"]["a"] == {
        "type": "object",
        "minProperties": 1,
        "propertyOrdering": ["x"],
    }


def test_a_list_of_types_is_a_union_every_dialect_can_read() -> None:
    listed = {"type": "object", "properties": {"note": {"type": ["string", "null"], "maxLength": 5}}}
    gemini = _mcp(listed).spec("gemini")["function"]["parameters"]
    assert gemini["properties"]["note"] == {"type": "string", "maxLength": 5, "nullable": True}
    assert_gemini(gemini)
    openai = _mcp(listed).spec("openai")["function"]
    assert openai["strict"] is True
    assert openai["parameters"]["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}


def test_a_record_in_a_server_schema_is_any_object_for_gemini_and_refused_in_a_local_tool() -> None:
    record = {"type": "object", "additionalProperties": {"type": "integer"}}
    listed = {"type": "object", "properties": {"labels": record}}
    assert _mcp(listed).spec("gemini")["function"]["parameters"]["properties"]["labels"] == {"type": "object"}
    with pytest.raises(SchemaError, match=r"labels: Gemini cannot take a record"):
        function_spec("t", "T", listed, "gemini")


def test_a_recursive_or_foreign_reference_ends_as_any_value() -> None:
    listed = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}, "other": {"$ref": "https://example.com/x.json"}},
        "$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}},
    }
    for dialect in DIALECTS:
        params = _mcp(listed).spec(dialect)["function"]["parameters"]
        assert "$ref" not in repr(params)
    notes = strict_notes(_mcp(listed).spec("openai")["function"]["parameters"])
    assert "root.child: any JSON value (Any / JsonValue) has no type strict mode can check" in notes
    assert "other: any JSON value (Any / JsonValue) has no type strict mode can check" in notes


def test_a_property_named_like_a_keyword_is_a_property() -> None:
    listed = {"type": "object", "properties": {"definitions": {"type": "string"}, "title": {"type": "string"}}}
    params = dialect_schema(listed, "anthropic")
    assert params["properties"] == {"definitions": {"type": "string"}, "title": {"type": "string"}}


def test_drop_null_optionals_leaves_out_only_what_may_be_left_out() -> None:
    listed = {
        "type": "object",
        "properties": {
            "greeting": {"type": "string"},
            "maybe": {"type": ["string", "null"]},
            "settings": {"type": "object", "additionalProperties": True},
            "inner": {"$ref": "#/$defs/Inner"},
            "many": {"type": "array", "items": {"$ref": "#/$defs/Inner"}},
            "either": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "string"}]},
        },
        "required": ["inner"],
        "$defs": {"Inner": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    }
    sent = {
        "greeting": None,
        "maybe": None,
        "settings": {"b": None},
        "inner": {"x": None},
        "many": [{"x": None}, {"x": 1}],
        "either": {"x": None},
    }
    kept = drop_null_optionals(listed, sent)
    assert kept == {"maybe": None, "settings": {"b": None}, "inner": {}, "many": [{}, {"x": 1}], "either": {}}
    jsonschema.validate(kept, listed)
    assert drop_null_optionals(listed, "not an object") == "not an object"


def test_what_the_openai_dialect_offers_validates_what_a_model_sends() -> None:
    """A model's null for an optional property is valid under what it was offered and, dropped, under the server's."""
    listed = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": []}
    offered = dialect_schema(listed, "openai")
    jsonschema.validate({"n": None}, offered)
    jsonschema.validate(drop_null_optionals(listed, {"n": None}), listed)
    gemini = dialect_schema(listed, "gemini")
    jsonschema.validate({"n": 3}, _gemini_as_json_schema(gemini))
