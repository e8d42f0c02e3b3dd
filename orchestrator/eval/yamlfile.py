"""YAML read with line numbers, so a pydantic error can name the line to edit.

Read by the project's one YAML loader (`providers.yaml_source.parse_yaml`): aliases are refused,
or bounded where a file kind documents anchors (eval scripts: `aliases_up_to`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from providers.yaml_source import parse_yaml

__all__ = ["Marks", "describe_errors", "read_yaml", "where"]

Marks = dict[tuple[Any, ...], int]


def read_yaml(
    path: Path, what: str, error: type[ValueError], *, aliases_up_to: int | None = None
) -> tuple[dict[str, Any], Marks]:
    """The mapping at the top of `path` and the line of every key and item in it (see `parse_yaml` for
    `aliases_up_to`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        data, node = parse_yaml(text, aliases_up_to=aliases_up_to)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f"{path}, line {mark.line + 1}" if mark else str(path)
        raise error(f"{place}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict) or node is None:
        raise error(f"{path}, line 1: expected a mapping at the top of the {what}")
    marks: Marks = {}
    _collect(node, (), marks)
    return data, marks


def _collect(node: yaml.Node, loc: tuple[Any, ...], marks: Marks) -> None:
    marks[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            _collect(value_node, (*loc, key_node.value), marks)
            marks[(*loc, key_node.value)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _collect(item, (*loc, i), marks)


def where(loc: tuple[Any, ...], marks: Marks, path: Path) -> str:
    """`file, line N` of the deepest part of `loc` the file has (pydantic adds parts YAML lacks)."""
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in marks:
            return f"{path}, line {marks[loc[:cut]]}"
    return str(path)


def describe_errors(exc: ValidationError, marks: Marks, path: Path, skip: frozenset[str] = frozenset()) -> list[str]:
    """One line per problem: where, which field, what was expected. `skip`: union tags pydantic inserts."""
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        shown = ".".join(str(p) for i, p in enumerate(loc) if not (p in skip and i and isinstance(loc[i - 1], int)))
        lines.append(f"{where(loc, marks, path)}: {shown or '(top)'}: {error['msg']}")
    return lines
