"""The tools one side may call, in the form its model's provider takes.

Local tools, prompts and exposed agents become function schemas (through
`schema.tool_spec` in the provider's dialect); provider-executed tools become
the provider's native tool or request parameter and are never run here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.definitions.define import AgentDefinition, DefinitionError, PromptDefinition, ToolDefinition

if TYPE_CHECKING:
    from orchestrator.mcp import McpTools

Callable_ = ToolDefinition | PromptDefinition | AgentDefinition

# Native forms of the provider tools we know by name. A tool's
# annotations["native"] (a dict) overrides these.
_ANTHROPIC_NATIVE: dict[str, dict[str, Any]] = {
    "web_search": {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    "web_fetch": {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 5},
    "code_execution": {"type": "code_execution_20250825", "name": "code_execution"},
}
_PROVIDER_FAMILIES = {
    "anthropic": "anthropic",
    "openai": "openai",
    "azure": "openai",
    "gemini": "gemini",
    "vertex_ai": "gemini",
}


@dataclass
class Toolset:
    tools: list[dict[str, Any]] = field(default_factory=list)  # the `tools=` of the request
    extra: dict[str, Any] = field(default_factory=dict)  # extra request params (e.g. web_search_options)
    callables: dict[str, Callable_] = field(default_factory=dict)  # name -> what a call runs
    provider_tools: set[str] = field(default_factory=set)  # names the provider executes

    def progress_argument(self, name: str) -> str | None:
        """The progress argument of the tool `name`, None for other callables and unknown names."""
        target = self.callables.get(name)
        return target.progress_argument if isinstance(target, ToolDefinition) else None


class ProviderToolMismatch(DefinitionError):
    pass


def build_toolset(
    names: tuple[str, ...], definitions: Any, dialect: str, provider_type: str, mcp: McpTools | None = None
) -> Toolset:
    """`mcp:` names expand to the MCP tools they stand for (`mcp.prepare` must have listed them)."""
    from orchestrator.definitions.schema import tool_spec

    out = Toolset()
    for name in names:
        if name.startswith("mcp:"):
            if mcp is None:
                raise DefinitionError(f"tool {name!r} names an MCP server, but the config has no mcp_servers")
            for tool in mcp.resolve(name):
                _add_unique(out, tool.exposed, tool.definition, tool.spec(dialect))
            continue
        target = definitions.resolve_callable(name)
        if isinstance(target, ToolDefinition) and target.execution_mode == "provider":
            _add_provider_tool(out, name, target, provider_type)
            continue
        out.callables[name] = target
        out.tools.append(tool_spec(name, _description(target), target.args, dialect))
    return out


def _add_unique(out: Toolset, name: str, target: ToolDefinition, spec: dict[str, Any]) -> None:
    if name in out.callables:
        raise DefinitionError(
            f"two tools offered to one model are named {name!r}; give the MCP server a `prefix` in the config"
        )
    out.callables[name] = target
    out.tools.append(spec)


def _description(target: Callable_) -> str:
    if isinstance(target, ToolDefinition):
        return target.description
    return target.tool_description or ""


def check_provider_tool(name: str, tool: ToolDefinition, provider_type: str) -> None:
    """A provider tool must run on the provider its definition names."""
    wanted = _PROVIDER_FAMILIES.get(tool.execution_provider or "", tool.execution_provider)
    have = _PROVIDER_FAMILIES.get(provider_type, provider_type)
    if wanted != have:
        raise ProviderToolMismatch(
            f"tool {name!r} is executed by provider {tool.execution_provider!r}, "
            f"but the model it is sent to is served by {provider_type!r}"
        )


def _add_provider_tool(out: Toolset, name: str, tool: ToolDefinition, provider_type: str) -> None:
    check_provider_tool(name, tool, provider_type)
    native = (tool.annotations or {}).get("native")
    family = _PROVIDER_FAMILIES.get(provider_type, provider_type)
    out.provider_tools.add(name)
    if family == "openai" and name == "web_search" and native is None:
        out.extra["web_search_options"] = dict((tool.annotations or {}).get("options", {}))
        return
    if native is None and family == "anthropic":
        native = _ANTHROPIC_NATIVE.get(name)
    if native is None:
        raise ProviderToolMismatch(
            f"tool {name!r}: no native form known for provider {provider_type!r}; "
            "set annotations={'native': {...}} to the provider's tool object"
        )
    out.tools.append(dict(native))
    if isinstance(native.get("name"), str):
        out.provider_tools.add(native["name"])
