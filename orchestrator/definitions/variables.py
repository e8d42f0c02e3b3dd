"""Who may set an env name a tool declares (`VariableDefinition.scope`), read across the tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.definitions.define import ToolDefinition, VariableScope


@dataclass(frozen=True)
class DeclaredScope:
    """Who may set an env name a tool declares (`VariableDefinition.scope`), and the tool that says so."""

    scope: VariableScope
    tool: str


def declared_scopes(tools: Mapping[str, ToolDefinition]) -> dict[str, DeclaredScope]:
    """Each env name the tools declare, with its scope. Tools that disagree are a load error
    (`scope_conflicts`); for definitions built in code, "operator" wins, the safe side."""
    found: dict[str, DeclaredScope] = {}
    for tool_name, tool in tools.items():
        for variable in tool.variables:
            seen = found.get(variable.name)
            if seen is None or (seen.scope == "thread" and variable.scope == "operator"):
                found[variable.name] = DeclaredScope(variable.scope, tool_name)
    return found


def scope_conflicts(tools: Mapping[str, ToolDefinition]) -> list[tuple[str, str, str]]:
    """(tool, name, other tool) for each tool declaring a name with a scope another tool's differs from."""
    first: dict[str, tuple[str, VariableScope]] = {}
    conflicts: list[tuple[str, str, str]] = []
    for tool_name, tool in tools.items():
        for variable in tool.variables:
            earlier = first.setdefault(variable.name, (tool_name, variable.scope))
            if earlier[1] != variable.scope:
                conflicts.append((tool_name, variable.name, earlier[0]))
    return conflicts
