"""A YAML config file read with the line of every node, so an error names the line to edit.

`parse_yaml` is the one YAML loader of the project: configs, eval suites and scripts, offline
model scripts (`--model turns.yaml`), the server's tokens file. It refuses aliases (a few lines
of them expand into gigabytes: 633 bytes of an eval suite took 2.96 GB), or, where a file kind
documents anchors (eval scripts), allows them as long as the document with every alias written
out stays small. Later config files deep-merge over earlier ones; `where` maps a location
(`("models", "main", "retry")`) to the nearest line known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["ConfigError", "Marks", "deep_merge", "parse_yaml", "read_yaml", "where"]

Marks = dict[tuple[Any, ...], tuple[str, int]]
"""Where each location of the loaded data was written: (file, line)."""


class ConfigError(ValueError):
    """The providers config is invalid; the message names file, line and field."""


class _Loader(yaml.SafeLoader):
    """SafeLoader refusing aliases (`*name`, `<<: *name`), or counting what they expand to.

    A few lines of aliases expand into gigabytes (the "billion laughs"): whatever walks the
    data (pydantic, an error message's repr, `json.dumps`) writes each alias out. With a budget,
    each node's size with its aliases written out is kept as it is composed (an alias adds its
    target's size, known by then), so the count is linear in the file and stops at the budget.
    """

    def __init__(self, text: str, aliases_up_to: int | None) -> None:
        super().__init__(text)
        self._budget = aliases_up_to
        self._sizes: dict[int, int] = {}  # id(node) -> its size with aliases written out

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # types-PyYAML leaves it unannotated
            if self._budget is None:
                raise self._refused("aliases (*name) are not allowed here: write the value out", event)
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._sizes:
                raise self._refused(f"alias *{event.anchor} refers to a value that holds it", event)
            return super().compose_node(parent, index)
        start = self.peek_event()  # type: ignore[no-untyped-call]
        node = super().compose_node(parent, index)
        if self._budget is not None:
            size = 1
            if isinstance(node, yaml.SequenceNode):
                size += sum(self._sizes[id(item)] for item in node.value)
            elif isinstance(node, yaml.MappingNode):
                size += sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
            if size > self._budget:
                raise self._refused(
                    f"with its aliases written out this holds more than {self._budget} values: write it flatter", start
                )
            self._sizes[id(node)] = size
        return node

    @staticmethod
    def _refused(problem: str, event: Any) -> yaml.composer.ComposerError:
        return yaml.composer.ComposerError(None, None, problem, event.start_mark)


def parse_yaml(text: str, *, aliases_up_to: int | None = None) -> tuple[Any, yaml.Node | None]:
    """The document's data and its nodes (for line numbers), parsed once; raises `yaml.YAMLError`.

    Aliases are refused unless `aliases_up_to` is given: then they may stand as long as the document,
    each alias written out, holds at most that many values. Nesting too deep to parse is an error too
    (PyYAML's composer recurses per level)."""
    loader = _Loader(text, aliases_up_to)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:
        raise yaml.YAMLError("the document nests too deeply to read") from None
    finally:
        loader.dispose()
    return data, node


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
        data, node = parse_yaml(text)
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
