"""Definitions against a config: every prompt's model alias exists, and its provider
tools run on its model's provider.

Shared by `orchestrator check --config` (which lists every problem) and
`Runtime.open` (which refuses to start), so both name the prompt, its file and
line, and what to change.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.definitions.define import DefinitionError, ToolDefinition
from orchestrator.definitions.loader import Definitions, Problem
from providers.config import ConfigError, ProvidersConfig

__all__ = ["model_problems"]


def model_problems(defs: Definitions, config: ProvidersConfig, *, override: str | None = None) -> list[Problem]:
    """Every prompt whose model cannot be used as configured (empty: all fine)."""
    from orchestrator.engine.toolset import check_provider_tool

    problems: list[Problem] = []
    for name, prompt in defs.prompts.items():
        file = defs.root / "prompts" / f"{name}.py"
        alias = override or prompt.model
        try:
            info = config.model_info(alias)
        except ConfigError as exc:
            source = "--model" if override else (f"its model={alias!r}" if alias else "the config's default_model")
            problems.append(
                Problem(
                    str(file),
                    "unknown-model",
                    f"prompt {name!r} ({source}): {exc}; define the alias under "
                    "`models:` in the config or change the prompt's model=",
                    _line_of(file, "model="),
                )
            )
            continue
        for tool_name in prompt.tools:
            if tool_name.startswith("mcp:"):
                problems += _mcp_reference(file, name, tool_name, config)
                continue
            try:
                target = defs.resolve_callable(tool_name)
            except KeyError:
                continue  # the loader reports unknown names
            if isinstance(target, ToolDefinition) and target.execution_mode == "provider":
                try:
                    check_provider_tool(tool_name, target, info.provider_type)
                except DefinitionError as exc:
                    problems.append(
                        Problem(
                            str(file),
                            "provider-tool",
                            f"prompt {name!r} on model {info.alias!r}: {exc}",
                            _line_of(file, tool_name),
                        )
                    )
    return problems


def _mcp_reference(file: Path, prompt: str, ref: str, config: ProvidersConfig) -> list[Problem]:
    """The MCP server a prompt names is declared (whether it offers the tool is known only once it runs)."""
    server = ref.removeprefix("mcp:").partition("/")[0]
    if server in config.mcp_servers:
        return []
    known = ", ".join(sorted(config.mcp_servers)) or "none"
    message = (
        f"prompt {prompt!r}: tool {ref!r} names MCP server {server!r}, which is not under mcp_servers "
        f"in the config (known: {known})"
    )
    return [Problem(str(file), "unknown-mcp-server", message, _line_of(file, ref))]


def _line_of(file: Path, needle: str) -> int | None:
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    return next((i for i, line in enumerate(lines, 1) if needle in line), None)
