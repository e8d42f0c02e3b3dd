"""`orchestrator mcp-serve`: the exposed agents as MCP tools (orchestrator/server/mcp_serve.py).

    orchestrator mcp-serve                                 # stdio: what an MCP client's config starts
    orchestrator mcp-serve --transport http --port 8765    # Streamable HTTP at http://127.0.0.1:8765/mcp
    orchestrator mcp-serve --model turns.yaml              # offline, on a script of model turns

Over HTTP there is no authentication yet, so it serves on a loopback address only. On stdio, stdout is
the protocol's: logs go to stderr.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.options import config_option, path_option

if TYPE_CHECKING:  # the mcp extra may be missing: imported where used
    from orchestrator.server.mcp_serve import AgentTools

__all__ = ["mcp_serve"]


@click.command("mcp-serve")
@path_option
@config_option
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP only; a loopback address.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="HTTP only.")
@click.option(
    "--model", default=None, help="Run every prompt on this alias, or offline (test, a script file, module:function)."
)
@click.option("--db", default=None, help="Storage: a SQLite file or a postgresql:// URL (default: the config's).")
@click.option("--user-id", default=None, help="The user the calls' threads belong to (default: none).")
@click.option("--max-input-bytes", default=100_000, show_default=True, type=click.IntRange(1))
@click.option("--log-level", default="WARNING", show_default=True, help="Structured logs go to stderr at this level.")
def mcp_serve(
    path: Path,
    config: tuple[str, ...],
    transport: str,
    host: str,
    port: int,
    model: str | None,
    db: str | None,
    user_id: str | None,
    max_input_bytes: int,
    log_level: str,
) -> None:
    """Serve every expose_as_tool agent as an MCP tool (each call runs a new thread of it).

    Needs the mcp extra (and the server extra for --transport http).
    """
    from orchestrator.core.extras import MissingExtra, require

    try:
        require("mcp", feature="orchestrator mcp-serve", extra="mcp")
        if transport == "http":
            require("uvicorn", feature="orchestrator mcp-serve --transport http", extra="server")
    except MissingExtra as exc:
        raise click.ClickException(str(exc)) from None
    from orchestrator.server.cli import is_loopback

    if transport == "http" and not is_loopback(host):
        raise click.UsageError(f"--host {host}: mcp-serve has no authentication yet, so it serves on loopback only")
    from orchestrator.cli.errors import errors_as_messages
    from orchestrator.core.logs import configure_logging
    from orchestrator.runtime import Runtime
    from orchestrator.server.mcp_serve import AgentTools

    configure_logging(log_level)
    with errors_as_messages(traceback=log_level.upper() == "DEBUG"):
        storage = db if db is None or "://" in db else f"sqlite:///{db}"
        runtime = Runtime.from_path(path, config=list(config), storage=storage, model=model)
    tools = AgentTools(runtime, user_id=user_id, max_input_bytes=max_input_bytes)
    if not tools.agents:
        raise click.UsageError(f"{path}: no agent has expose_as_tool=True, so there is nothing to serve")
    asyncio.run(_serve(tools, transport, host, port, log_level))


async def _serve(tools: AgentTools, transport: str, host: str, port: int, log_level: str) -> None:
    from orchestrator.server.mcp_serve import http_app, serve_stdio

    try:
        if transport == "stdio":
            await serve_stdio(tools)
        else:
            import uvicorn

            app = http_app(tools, host)
            config = uvicorn.Config(app, host=host, port=port, log_level=log_level.lower(), access_log=False)
            await uvicorn.Server(config).serve()
    finally:
        await tools.runtime.close()
