"""Tools a client declares for one run (an AG-UI frontend's `RunAgentInput.tools`), offered to the model
beside the prompt's own, and answered by that client.

A client tool runs nowhere here: each is a deferred `ToolDefinition` (engine/waiting.py), so a call to
one is stored as waiting for a result, the execution ends `awaiting_result`, and the client's result
(`thread.submit_result`) resumes it. There is no second mechanism: timeouts, stop while waiting,
idempotent decisions and restarts are those of every deferred call.

The set is per run, not per agent: the caller passes it with the start or resume of an execution
(`Thread.start(..., tools=)`, `Thread.submit_result(..., tools=)`), and only the agent's own sides
(the thread's level, not a prompt called as a tool) are offered it. A resume without it finds the
call's tool unknown (an error result the model reads), which is why a client sends its tools with
every run, as AG-UI clients do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from orchestrator.core.results import ToolResult
from orchestrator.definitions.define import DefinitionError, ToolDefinition
from orchestrator.definitions.dialect import drop_null_optionals, function_spec
from orchestrator.engine.toolset import Toolset

__all__ = ["CLIENT_TOOL", "client_tool", "is_client_tool", "with_client_tools"]

CLIENT_TOOL = "client_tool"  # the annotation marking a client's tool; its value is the parameters' JSON schema


def client_tool(name: str, description: str, parameters: dict[str, Any]) -> ToolDefinition:
    """A deferred tool whose result the client supplies; its arguments are checked against `parameters`
    (a JSON schema of an object) like an MCP tool's, so a model's malformed call is its error to fix."""
    if not isinstance(parameters, dict):
        raise DefinitionError(f"client tool {name!r}: parameters must be a JSON schema object")
    schema = {"type": "object", "properties": {}, **parameters}

    async def execute(state: object, args: BaseModel) -> ToolResult:
        return ToolResult.deferred()  # nothing to start here: the client runs it when it reads the call

    return ToolDefinition(
        name=name,
        description=description or name,
        execute=execute,
        args=_arguments_model(name, schema),
        annotations={CLIENT_TOOL: schema},
        deferred=True,
    )


def is_client_tool(tool: object) -> bool:
    return isinstance(tool, ToolDefinition) and CLIENT_TOOL in (tool.annotations or {})


def with_client_tools(toolset: Toolset, tools: Sequence[ToolDefinition], dialect: str) -> Toolset:
    """A copy of `toolset` with the client's tools added (the cached one is shared by every thread).
    A client tool named like one of the prompt's is refused: the model could not tell them apart."""
    out = Toolset(list(toolset.tools), dict(toolset.extra), dict(toolset.callables), set(toolset.provider_tools))
    for tool in tools:
        name = tool.name or ""
        if name in out.callables or name in out.provider_tools:
            raise DefinitionError(f"client tool {name!r} has the name of one of the agent's own tools; rename it")
        schema = (tool.annotations or {})[CLIENT_TOOL]
        out.callables[name] = tool
        out.tools.append(function_spec(name, tool.description, schema, dialect, loose=True))
    return out


def _arguments_model(tool: str, schema: dict[str, Any]) -> type[BaseModel]:
    """A model that checks a call's arguments against the client's schema and keeps them as sent."""
    from jsonschema import validators

    checker = validators.validator_for(schema)
    checker.check_schema(schema)  # SchemaError: the client's schema is not one
    validator = checker(schema)

    class ClientArguments(BaseModel):
        model_config = ConfigDict(extra="allow")

        @model_validator(mode="before")
        @classmethod
        def _valid(cls, data: Any) -> Any:
            data = drop_null_optionals(schema, data)
            problems = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
            if problems:
                raise ValueError("; ".join(p.message for p in problems[:5]))
            return data

    ClientArguments.__name__ = f"{tool}_arguments"
    return ClientArguments
