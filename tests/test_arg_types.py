"""The supported-type check on a tool's argument model (orchestrator/definitions/arg_types.py): what is
refused, with the dotted path of the field and what to write instead."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel, create_model

from orchestrator.definitions.arg_types import SchemaError, check_args_model
from orchestrator.definitions.define import DefinitionError


class Opaque:
    pass


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Holder(BaseModel):
    tree: Node


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [
        (bytes, "bytes is not supported"),
        (dt.datetime, "datetime is not supported"),
        (dt.date, "date is not supported"),
        (set[str], "a set is not supported"),
        (frozenset[int], "a set is not supported"),
        (tuple[int, int], "a tuple is not supported"),
        (Decimal, "Decimal is not a supported type"),
        (object, "object is not a supported type"),
        (dict[int, str], "a record's keys must be str"),
        (dict[int, Any], "a record's keys must be str"),
        (list[bytes], "bytes is not supported"),
    ],
)
def test_unsupported_type_is_refused_with_path(annotation: Any, reason: str) -> None:
    inner = create_model("Inner", bad=(annotation, ...), __config__={"arbitrary_types_allowed": True})
    outer = create_model("Outer", items=(list[inner], ...))
    with pytest.raises(SchemaError) as err:
        check_args_model(outer)
    assert "Outer.items[].bad" in str(err.value)
    assert reason in str(err.value)


def test_arbitrary_class_is_refused_with_path() -> None:
    model = create_model("Args", thing=(Opaque, ...), __config__={"arbitrary_types_allowed": True})
    with pytest.raises(SchemaError, match=r"Args\.thing: Opaque is not a supported type"):
        check_args_model(model)


def test_datetime_message_says_how_to_declare_a_date() -> None:
    model = create_model("Args", since=(dt.datetime, ...))
    with pytest.raises(SchemaError) as err:
        check_args_model(model)
    assert '"format": "date-time"' in str(err.value)


def test_recursive_model_is_refused() -> None:
    with pytest.raises(SchemaError, match=r"Holder\.tree\.children\[\]: recursive model 'Node'"):
        check_args_model(Holder)


def test_schema_error_is_a_definition_error() -> None:
    assert issubclass(SchemaError, DefinitionError)


def test_non_model_args_refused() -> None:
    with pytest.raises(SchemaError):
        check_args_model(dict)  # type: ignore[arg-type]
