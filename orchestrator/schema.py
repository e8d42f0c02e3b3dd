"""Pydantic model -> JSON schema for tools, with provider dialects.

PLACEHOLDER: being written by the foundation work (issue 2).
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .definitions import DefinitionError


class SchemaError(DefinitionError):
    """An argument model uses a type models cannot take; names the dotted path."""


def check_args_model(model: type[BaseModel]) -> None:
    return None


def is_plain_string_field(field: FieldInfo) -> bool:
    return field.annotation is str


def tool_parameters(model: type[BaseModel] | None, dialect: str = "openai") -> dict:
    if model is None:
        return {"type": "object", "properties": {}}
    return model.model_json_schema()
