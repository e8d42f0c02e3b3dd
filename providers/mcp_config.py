"""The `mcp_servers:` section of the config: one MCP server each (see orchestrator/mcp and docs/mcp.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["MCP_NAME", "McpServerConfig"]

MCP_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class McpServerConfig(BaseModel):
    """An MCP server whose tools a prompt offers as `mcp:NAME` (all allowed tools) or `mcp:NAME/TOOL`.

    It runs with the rights of the user who starts the runtime (it is not sandboxed): a stdio
    server gets only the `env` declared here, beside the few variables the MCP SDK always passes
    (HOME, LOGNAME, PATH, SHELL, TERM, USER).
    """

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(None, description="stdio transport: the executable to start")
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None
    url: str | None = Field(None, description="Streamable HTTP transport: the endpoint URL")
    env: dict[str, str] = Field(default_factory=dict, description="for a stdio server; values may be ${VAR}")
    headers: dict[str, str] = Field(default_factory=dict, description="for an HTTP server; values may be ${VAR}")
    timeout: float = Field(30.0, gt=0, description="seconds one tool call may take")
    startup_timeout: float = Field(15.0, gt=0, description="seconds to start and list tools")
    include: list[str] | None = Field(None, description="allow-list of the server's tool names")
    exclude: list[str] = Field(default_factory=list, description="deny-list of the server's tool names")
    prefix: str = Field("", description="prepended to each tool name the model sees")
    scope: Literal["runtime", "thread"] = Field("runtime", description="one session per runtime, or per thread")
    progress_arguments: dict[str, str] = Field(
        default_factory=dict, description="tool name -> its string argument reported by tool_call_started"
    )
    needs_approval: bool | list[str] = Field(
        False, description="true: every call of this server's tools waits for approval; a list: those tools' calls"
    )
    approval_timeout: float | None = Field(None, gt=0, description="seconds an approval may wait, then rejected")

    def approval_needed(self, tool: str) -> bool:
        """Whether calls of the server's tool `tool` (its own name, not the prefixed one) wait for approval."""
        return self.needs_approval is True or (isinstance(self.needs_approval, list) and tool in self.needs_approval)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of `command` (stdio) or `url` (Streamable HTTP)")
        if self.prefix and not MCP_NAME.match(self.prefix):
            raise ValueError(f"prefix {self.prefix!r} may hold only letters, digits, '_' and '-'")
        return self

    @field_validator("env", "headers")
    @classmethod
    def _no_literal_secrets(cls, values: dict[str, str]) -> dict[str, str]:
        from providers.config import _no_literal_secrets  # the providers' rule (config imports this module at its top)

        return _no_literal_secrets(values)

    def resolved_env(self, server: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """`env` with `${VAR}` filled in now; a missing variable names itself and this server."""
        from providers.config import _expand

        env = os.environ if environ is None else environ
        return {k: _expand(v, env, f"mcp server {server}", f"env.{k}") or "" for k, v in self.env.items()}

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """What `${VAR}` in `env` and `headers` takes from the environment: a credential handed to a
        server is a secret of the whole process, redacted everywhere like a provider's key. Literal
        values are in the config for anyone to read (and a key-like one is refused), so they are not."""
        from providers.config import _ENV_REF

        env = os.environ if environ is None else environ
        return [
            env[match.group(1)]
            for value in [*self.env.values(), *self.headers.values()]
            for match in _ENV_REF.finditer(value)
            if match.group(1) in env
        ]

    def resolved_headers(self, server: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        from providers.config import _expand

        env = os.environ if environ is None else environ
        return {k: _expand(v, env, f"mcp server {server}", f"headers.{k}") or "" for k, v in self.headers.items()}
