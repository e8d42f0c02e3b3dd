"""A YAML config file read with the line of every node, so an error names the line to edit.

Aliases are refused (a few lines of them expand into gigabytes); later files deep-merge over
earlier ones; `where` maps a location (`("models", "main", "retry")`) to the nearest line known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["ConfigError", "Marks", "deep_merge", "read_yaml", "where"]

Marks = dict[tuple[Any, ...], tuple[str, int]]
"""Where each location of the loaded data was written: (file, line)."""


class ConfigError(ValueError):
    """The providers config is invalid; the message names file, line and field."""


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader refusing aliases (`*name`, `<<: *name`): a few lines of them
    expand into gigabytes (the "billion laughs"), and a config never needs one."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not allowed in config files: write the value out",
                self.peek_event().start_mark,  # type: ignore[no-untyped-call]  # types-PyYAML leaves it unannotated
            )
        return super().compose_node(parent, index)


def read_yaml(path: Path) -> tuple[dict[str, Any], Marks]:
    """The file's mapping and the line of each location in it (empty for an empty file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read providers config: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        node = yaml.compose(text, Loader=_NoAliasLoader)
        data = yaml.load(text, Loader=_NoAliasLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if data is None or node is None:  # an empty document: neither has anything
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}, line 1: expected a mapping with providers/models/default_model at the top")
    marks: Marks = {}
    _collect_marks(node, (), str(path), marks)
    return data, marks


def _collect_marks(node: yaml.Node, loc: tuple[Any, ...], source: str, marks: Marks) -> None:
    marks[loc] = (source, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            marks[(*loc, key)] = (source, key_node.start_mark.line + 1)
            _collect_marks(value_node, (*loc, key), source, marks)
            marks[(*loc, key)] = (source, key_node.start_mark.line + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _collect_marks(item, (*loc, i), source, marks)


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def where(loc: tuple[Any, ...], marks: Marks, source: str) -> str:
    """ "file, line N" of `loc` or its nearest parent with a mark; else `source`."""
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in marks:
            file, line = marks[loc[:cut]]
            return f"{file}, line {line}"
    return source
