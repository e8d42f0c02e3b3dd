"""Tools from Model Context Protocol servers (the `[mcp]` extra): see docs/mcp.md."""

from .session import McpServerError
from .tools import McpReferenceError, McpTool, McpTools, is_reference

__all__ = ["McpReferenceError", "McpServerError", "McpTool", "McpTools", "is_reference"]
