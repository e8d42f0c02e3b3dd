"""Tools from Model Context Protocol servers (the `[mcp]` extra): see docs/mcp.md."""

from orchestrator.mcp.session import McpServerError
from orchestrator.mcp.tools import McpReferenceError, McpTool, McpTools, is_reference

__all__ = ["McpReferenceError", "McpServerError", "McpTool", "McpTools", "is_reference"]
