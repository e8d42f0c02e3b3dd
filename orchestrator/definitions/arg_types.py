"""Which Python types a tool's argument model may use: checked on the annotations when a tool is
defined, before any JSON schema exists (the first of the two jobs `orchestrator/definitions/schema.py` describes).

A type a model provider cannot take is refused at import (and in `orchestrator check`) with the
field's dotted path, instead of surfacing as a 400 in the middle of a conversation.
"""

from __future__ import annotations

import datetime as _dt
import enum
import re
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, JsonValue, PydanticSchemaGenerationError, RootModel
from pydantic.fields import FieldInfo

from orchestrator.definitions.define import DefinitionError

__all__ = [
    "MAX_DEPTH",
    "SchemaError",
    "check_args_model",
    "is_plain_string_field",
    "join_path",
    "mentions_class",
    "unsupported_class",
]

MAX_DEPTH = 7

_SUPPORTED = (
    "supported: str, int, float, bool, Literal, Enum, list[T], dict[str, T], "
    "a BaseModel, unions and Optional; Any, JsonValue, dict[str, Any] and list[Any] for free-form JSON"
)


class SchemaError(DefinitionError):
    """An argument model uses a type models cannot take; names the dotted path."""


def check_args_model(model: type[BaseModel]) -> None:
    """Refuse an args model whose fields a provider cannot take. See the module doc."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise SchemaError(f"args must be a pydantic BaseModel subclass, got {model!r}")
    if issubclass(model, RootModel):
        raise SchemaError(f"{model.__name__}: args must be an object model, not a RootModel")
    _check_model(model, path="", level=1, stack=())
    try:
        model.model_json_schema()
    except Exception as exc:  # e.g. a default pydantic cannot serialise
        raise SchemaError(f"{model.__name__}: cannot build a JSON schema: {exc}") from exc


def unsupported_class(exc: Exception) -> tuple[str, str] | None:
    """(the class's name, what to say) when pydantic refused an argument model over a class it cannot
    validate; None for any other error. Pydantic's own text suggests `arbitrary_types_allowed`, which
    only moves the failure to the JSON schema a model is sent (and leaks pydantic internals)."""
    if not isinstance(exc, PydanticSchemaGenerationError):
        return None
    found = re.search(r"schema for (.+?)\. Set `arbitrary_types_allowed", str(exc))
    shown = found.group(1) if found else "a class"
    plain = re.fullmatch(r"<class '(?:[\w.]*\.)?(\w+)'>", shown)
    name = plain.group(1) if plain else shown
    reason = f"{name} is not a supported type: models send JSON; make {name} a BaseModel ({_SUPPORTED})"
    return name, reason


def mentions_class(annotation: Any, name: str) -> bool:
    """True when `annotation` is, or holds (list[X], X | None, Annotated[X, ...]), a class called `name`."""
    if getattr(annotation, "__name__", None) == name and isinstance(annotation, type):
        return True
    return any(mentions_class(arg, name) for arg in get_args(annotation))


def is_plain_string_field(field: FieldInfo) -> bool:
    """True for a field typed exactly `str`: what a progress argument must be."""
    return field.annotation is str


def _check_model(model: type[BaseModel], *, path: str, level: int, stack: tuple[type, ...]) -> None:
    if model in stack:
        raise _refuse(stack[0], path, f"recursive model {model.__name__!r} is not supported")
    if level > MAX_DEPTH:
        raise _refuse(stack[0], path, f"nesting of {level} levels exceeds the maximum of {MAX_DEPTH}")
    stack = (*stack, model)
    for name, field in model.model_fields.items():
        _check_type(field.annotation, path=join_path(path, name), level=level, stack=stack)


def _check_type(tp: Any, *, path: str, level: int, stack: tuple[type, ...]) -> None:
    """Walk one annotation. `level` is the level of the object holding the field."""
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _check_type(get_args(tp)[0], path=path, level=level, stack=stack)
    if tp in (str, int, float, bool, type(None)) or tp is Any or tp is JsonValue:
        return None
    if origin in (Union, types.UnionType):
        for member in get_args(tp):
            _check_type(member, path=path, level=level, stack=stack)
        return None
    if origin is Literal:
        return _check_literal(tp, path=path, stack=stack)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _check_enum(tp, path=path, stack=stack)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _check_model(tp, path=path, level=level + 1, stack=stack)
    if origin is list or tp is list:
        return _check_container(tp, path=path, level=level, stack=stack)
    if origin is dict or tp is dict:
        return _check_record(tp, path=path, level=level, stack=stack)
    raise _refuse(stack[0], path, _reason(tp))


def _check_container(tp: Any, *, path: str, level: int, stack: tuple[type, ...]) -> None:
    args = get_args(tp) or (Any,)  # a bare `list` holds any JSON values
    if level + 1 > MAX_DEPTH:
        raise _refuse(stack[0], path, f"nesting of {level + 1} levels exceeds the maximum of {MAX_DEPTH}")
    _check_type(args[0], path=f"{path}[]", level=level + 1, stack=stack)


def _check_record(tp: Any, *, path: str, level: int, stack: tuple[type, ...]) -> None:
    args = get_args(tp) or (str, Any)  # a bare `dict` is any JSON object
    if args[0] is not str:
        raise _refuse(stack[0], path, f"a record's keys must be str, got {_type_name(args[0])}")
    if level + 1 > MAX_DEPTH:
        raise _refuse(stack[0], path, f"nesting of {level + 1} levels exceeds the maximum of {MAX_DEPTH}")
    _check_type(args[1], path=f"{path}[]", level=level + 1, stack=stack)


def _check_literal(tp: Any, *, path: str, stack: tuple[type, ...]) -> None:
    for value in get_args(tp):
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise _refuse(stack[0], path, f"Literal value {value!r} is not a JSON value")


def _check_enum(tp: type[enum.Enum], *, path: str, stack: tuple[type, ...]) -> None:
    for member in tp:
        if not isinstance(member.value, (str, int)) or isinstance(member.value, bool):
            raise _refuse(stack[0], path, f"enum {tp.__name__} has a non-str/int value {member.value!r}")


def _reason(tp: Any) -> str:
    origin = get_origin(tp) or tp
    if tp in (bytes, bytearray):
        return "bytes is not supported: models send text (use str, e.g. base64)"
    if tp in (_dt.datetime, _dt.date, _dt.time, _dt.timedelta):
        return (
            f"{tp.__name__} is not supported: declare a str with "
            'Field(json_schema_extra={"format": "date-time"}) and parse it in execute'
        )
    if origin in (set, frozenset) or tp in (set, frozenset):
        return "a set is not supported: use list[T]"
    if origin is tuple or tp is tuple:
        return "a tuple is not supported: use list[T]"
    return f"{_type_name(tp)} is not a supported type ({_SUPPORTED})"


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def join_path(path: str, name: str) -> str:
    """`path.name`, or `name` at the top: how a refused field is named."""
    return f"{path}.{name}" if path else name


def _refuse(root: type, path: str, reason: str) -> SchemaError:
    return SchemaError(f"{join_path(root.__name__, path)}: {reason}")
