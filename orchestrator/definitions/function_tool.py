"""A tool's argument model and `execute`, built from a plain async function.

`define_tool(fn)` (or `@define_tool`) reads what a Python user already wrote
instead of asking for a separate `Args` model: the parameters' type hints
and defaults (`Annotated[T, Field(...)]` included) become the fields, the
docstring's text before its sections becomes the tool's description, and its
parameter section (Google, NumPy or Sphinx style, read by `docstring_parser`)
becomes the fields' descriptions. A first parameter annotated `ThreadState`
receives the thread's state and is not an argument. The model is then held
to exactly the rules of an `Args` model (`schema.check_args_model`), so the
same types are refused, naming the parameter.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from orchestrator.definitions.arg_types import SchemaError, check_args_model, mentions_class, unsupported_class
from orchestrator.definitions.define import DefinitionError
from orchestrator.definitions.thread_state import ThreadState

__all__ = ["FunctionTool", "from_function"]

_NO_DEFAULT = inspect.Parameter.empty


@dataclass(frozen=True)
class FunctionTool:
    """What `define_tool` needs from a function: its model, an `execute` and a description."""

    args: type[BaseModel] | None
    execute: Callable[..., Awaitable[Any]]
    description: str


def from_function(fn: Callable[..., Awaitable[Any]]) -> FunctionTool:
    """Read `fn`'s signature and docstring; raise `DefinitionError` naming what is wrong."""
    name = getattr(fn, "__name__", repr(fn))
    where = f"define_tool({name})"
    if not inspect.iscoroutinefunction(fn):
        raise DefinitionError(f"{where}: the function must be async (async def), so a slow tool never blocks the loop")
    params = list(inspect.signature(fn).parameters.values())
    hints = _type_hints(fn, where)
    takes_state = bool(params) and _is_state(hints.get(params[0].name))
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    described = {p.arg_name: (p.description or "").strip() for p in doc.params}
    _check_documented(described, {p.name for p in params}, where)
    params = params[1:] if takes_state else params
    fields = {p.name: _field(p, hints, described.get(p.name), where) for p in params}
    model = _model(name, fields, where) if fields else None
    return FunctionTool(args=model, execute=_executor(fn, takes_state, params, model), description=_description(doc))


def _type_hints(fn: Callable[..., Any], where: str) -> dict[str, Any]:
    """Resolve the hints, `ThreadState` included even when imported only for type checking."""
    try:
        return typing.get_type_hints(fn, localns={"ThreadState": ThreadState}, include_extras=True)
    except NameError as exc:
        raise DefinitionError(
            f"{where}: cannot resolve a type hint ({exc}); import that name at module level"
        ) from None


def _is_state(hint: Any) -> bool:
    """`ThreadState` (the interface), or a protocol or class of the user's that extends it."""
    hint = get_args(hint)[0] if get_origin(hint) is Annotated else hint
    return isinstance(hint, type) and ThreadState in getattr(hint, "__mro__", ())


def _field(param: inspect.Parameter, hints: dict[str, Any], doc: str | None, where: str) -> tuple[Any, Any]:
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        star = "*" if param.kind is param.VAR_POSITIONAL else "**"
        raise DefinitionError(f"{where}: {star}{param.name} cannot be a tool argument; name each argument")
    if param.name not in hints:
        raise DefinitionError(f"{where}: parameter {param.name!r} needs a type annotation (e.g. {param.name}: str)")
    hint = hints[param.name]
    if _is_state(hint):
        raise DefinitionError(f"{where}: parameter {param.name!r}: the ThreadState must be the first parameter")
    default = ... if param.default is _NO_DEFAULT else param.default
    if doc and not _has_description(hint):
        return hint, Field(default, description=doc)
    return hint, default


def _has_description(hint: Any) -> bool:
    if get_origin(hint) is not Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in get_args(hint)[1:])


def _check_documented(described: dict[str, str], known: set[str], where: str) -> None:
    """A documented parameter the function does not take is a docstring gone stale: say so."""
    for doc_name in described:
        if doc_name not in known:
            raise DefinitionError(
                f"{where}: the docstring describes parameter {doc_name!r}, which the function does not take "
                f"(it takes: {', '.join(sorted(known)) or 'nothing'})"
            )


def _model(name: str, fields: dict[str, tuple[Any, Any]], where: str) -> type[BaseModel]:
    try:
        config = ConfigDict(protected_namespaces=())  # a parameter may be called `model_name`
        model: type[BaseModel] = create_model(name, __config__=config, **fields)  # type: ignore[call-overload]
    except Exception as exc:  # pydantic refuses the annotation itself (e.g. a default inside Annotated)
        refused = unsupported_class(exc)  # a class pydantic cannot validate: name the parameter, not pydantic
        if refused is not None:
            param = next((n for n, (hint, _) in fields.items() if mentions_class(hint, refused[0])), None)
            raise SchemaError(f"{where}: {f'parameter {param!r}: ' if param else ''}{refused[1]}") from None
        raise DefinitionError(f"{where}: cannot build its arguments: {exc}") from None
    try:
        check_args_model(model)
    except SchemaError as exc:
        param = str(exc).split(":", 1)[0].removeprefix(f"{name}.").split(".", 1)[0].split("[", 1)[0]
        raise SchemaError(f"{where}: parameter {param!r}: {exc}") from None
    return model


def _executor(
    fn: Callable[..., Awaitable[Any]], takes_state: bool, params: list[inspect.Parameter], model: type[BaseModel] | None
) -> Callable[..., Awaitable[Any]]:
    """`execute(state, args)` (or `execute(state)`) that calls `fn` with the validated values as typed."""
    positional = [p.name for p in params if p.kind is not p.KEYWORD_ONLY]
    keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY]

    async def execute_with_args(state: ThreadState, args: BaseModel) -> Any:
        head = (state,) if takes_state else ()
        values = [getattr(args, n) for n in positional]
        return await fn(*head, *values, **{n: getattr(args, n) for n in keyword})

    async def execute_without_args(state: ThreadState) -> Any:
        return await (fn(state) if takes_state else fn())

    execute = execute_with_args if model is not None else execute_without_args
    execute.__name__ = execute.__qualname__ = getattr(fn, "__name__", "execute")
    return execute


def _description(doc: docstring_parser.Docstring) -> str:
    """The text before the docstring's sections: its summary and any paragraphs after it."""
    parts = [doc.short_description, doc.long_description]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())
