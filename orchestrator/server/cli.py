"""`orchestrator serve`: the API, the WebSocket and the page on one port.

    orchestrator serve                                  # open server on 127.0.0.1:8000
    orchestrator serve --scripted demo                  # offline demo: the built-in script
    ORCHESTRATOR_TOKENS="tA:alice,tB:bob" orchestrator serve --host 0.0.0.0 --allowed-host chat.example.com

Without tokens the server listens on loopback only and answers only to the
loopback host names (`--allowed-host` adds others); see docs/security.md.

Models come from the config as usual; `--replay CASSETTE` serves recorded
responses instead (one conversation's worth, consumed once), and
`--scripted SCRIPT.json` a stateless scripted model that can answer many
conversations at once (see `orchestrator.server.scripted`).
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli.options import config_option, path_option, redis_option, temporal_options

if TYPE_CHECKING:  # the server extra may be missing: imported where used
    from fastapi import FastAPI

    from orchestrator.runtime import Runtime
    from orchestrator.storage.broker import RedisBroker
    from orchestrator.temporal import TemporalOptions


@contextlib.contextmanager
def _models(replay: str | None, scripted: str | None) -> Iterator[None]:
    if replay and scripted:
        raise click.UsageError("--replay and --scripted exclude each other: pick one source of model answers")
    if replay:
        from providers.cassette import replay as replaying

        with replaying(replay):
            yield
    elif scripted:
        from orchestrator.server.scripted import DEMO_SCRIPT, scripted_model

        try:
            model = scripted_model(DEMO_SCRIPT if scripted == "demo" else scripted)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--scripted") from None
        with model.serving():
            yield
    else:
        yield


def _storage_url(db: str | None) -> str | None:
    if db is None or "://" in db:
        return db
    return f"sqlite:///{db}"


def _tokens(tokens_file: Path | None) -> dict[str, str] | None:
    if tokens_file is None:
        return None
    import yaml

    from providers.yaml_source import parse_yaml

    try:
        data: Any = parse_yaml(tokens_file.read_text(encoding="utf-8"))[0]
    except (OSError, yaml.YAMLError) as exc:
        raise click.BadParameter(f"{tokens_file}: {exc}", param_hint="--tokens-file") from None
    except UnicodeDecodeError:
        raise click.BadParameter(f"{tokens_file}: not UTF-8 text", param_hint="--tokens-file") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise click.BadParameter(
            f"{tokens_file}: expected a mapping of token: user_id strings", param_hint="--tokens-file"
        )
    return data


@path_option
@config_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--db", default=None, help="Storage: a SQLite file or a postgresql:// URL (default: the config's).")
@click.option("--replay", default=None, metavar="CASSETTE", help="Answer model requests from a recorded cassette.")
@click.option(
    "--scripted",
    default=None,
    metavar="SCRIPT.json",
    help="Answer from a scripted model ('demo': the built-in script).",
)
@click.option(
    "--tokens-file",
    default=None,
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML mapping token: user_id (adds to env ORCHESTRATOR_TOKENS).",
)
@click.option("--max-body-bytes", default=1_000_000, show_default=True, type=click.IntRange(1))
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@temporal_options(required=False)
@redis_option
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name this server answers to (repeat; '*' for any). "
    "Default: the loopback names on loopback, any elsewhere.",
)
@click.option(
    "--allowed-origin",
    "allowed_origins",
    multiple=True,
    metavar="URL",
    help="Another origin (https://app.example.com) whose pages may write and open sockets (repeat).",
)
@click.option(
    "--request-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds a client has to send a whole request (head and body) before its connection is closed.",
)
@click.option(
    "--max-connections",
    default=4096,
    show_default=True,
    type=click.IntRange(1),
    help="Open connections at most; more are closed at once (kept under the file descriptor limit).",
)
@click.option(
    "--docs",
    is_flag=True,
    help="Serve the API's Swagger UI at /docs (loaded from a CDN, pinned and integrity-checked).",
)
def _serve(
    path: Path,
    config: tuple[str, ...],
    host: str,
    port: int,
    db: str | None,
    replay: str | None,
    scripted: str | None,
    tokens_file: Path | None,
    max_body_bytes: int,
    log_level: str,
    temporal: str | None,
    namespace: str,
    task_queue: str,
    heartbeat_timeout: float,
    redis: str | None,
    allowed_hosts: tuple[str, ...],
    allowed_origins: tuple[str, ...],
    request_timeout: float,
    max_connections: int,
    docs: bool,
) -> None:
    """Serve the HTTP API, the per-thread WebSocket and the watch page.

    Needs the server extra: pip install 'orchestrator-runtime[server]'.
    """
    uvicorn = _server_dependencies()

    from orchestrator.cli.errors import errors_as_messages
    from orchestrator.runtime import Runtime
    from orchestrator.server.guard import LOOPBACK_HOSTS
    from orchestrator.server.serving import server_config

    tokens = _tokens(tokens_file)
    with _models(replay, scripted):
        with errors_as_messages(traceback=log_level == "debug"):  # a config or definitions error: one block
            runtime = Runtime.from_path(path, config=list(config), storage=_storage_url(db))
        options, broker = (
            _temporal_and_broker(runtime, temporal, namespace, task_queue, heartbeat_timeout, redis)
            if temporal
            else (None, None)
        )
        hosts = list(allowed_hosts) or (list(LOOPBACK_HOSTS) if is_loopback(host) else None)
        app = _app(runtime, tokens, max_body_bytes, options, broker, hosts, allowed_origins, docs=docs)
        if not app.state.server.auth.enabled and not is_loopback(host):
            raise click.UsageError(
                f"no tokens configured: refusing to serve on {host}, where anyone who can reach it would see "
                "every thread. Set ORCHESTRATOR_TOKENS or --tokens-file, or serve on 127.0.0.1."
            )
        settings = server_config(
            app,
            host=host,
            port=port,
            request_timeout=request_timeout,
            max_connections=max_connections,
            log_level=log_level,
            access_log=log_level == "debug",
        )
        uvicorn.Server(settings).run()


def _app(
    runtime: Runtime,
    tokens: dict[str, str] | None,
    max_body_bytes: int,
    temporal: TemporalOptions | None,
    broker: RedisBroker | None,
    hosts: list[str] | None,
    origins: tuple[str, ...],
    *,
    docs: bool = False,
) -> FastAPI:
    from orchestrator.server.app import create_app

    return create_app(
        runtime,
        tokens=tokens,
        max_body_bytes=max_body_bytes,
        own_runtime=True,
        temporal=temporal,
        broker=broker,
        allowed_hosts=hosts,
        allowed_origins=origins,
        docs=docs,
    )


def _server_dependencies() -> ModuleType:
    """uvicorn, once FastAPI and the WebSocket protocol are known to import: the base install has none of them."""
    from orchestrator.core.extras import MissingExtra, require

    try:
        for module in ("fastapi", "websockets"):
            require(module, feature="orchestrator serve", extra="server")
        return require("uvicorn", feature="orchestrator serve", extra="server")
    except MissingExtra as exc:
        raise click.ClickException(str(exc)) from None


def is_loopback(host: str) -> bool:
    """True for an address (or `localhost`) only this machine can reach."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _temporal_and_broker(
    runtime: Any, address: str, namespace: str, task_queue: str, heartbeat_timeout: float, redis: str | None
) -> tuple[Any, Any]:
    from orchestrator.core.extras import MissingExtra, missing_extra_message
    from orchestrator.storage.broker import RedisBroker
    from orchestrator.storage.postgres import PostgresStorage

    try:
        from orchestrator.temporal import TemporalOptions
    except ImportError:
        raise click.UsageError(missing_extra_message("--temporal", "temporal")) from None
    if not isinstance(runtime.storage, PostgresStorage):
        raise click.UsageError(
            "--temporal needs PostgreSQL storage shared with the workers: pass --db postgresql://..."
        )
    redis = redis or runtime.settings.redis
    if not redis:
        raise click.UsageError(
            "--temporal needs Redis for events across processes: pass --redis redis://... (or ORCHESTRATOR_REDIS)"
        )
    options = TemporalOptions(
        address=address, namespace=namespace, task_queue=task_queue, heartbeat_timeout=heartbeat_timeout
    )
    try:
        return options, RedisBroker(redis)
    except MissingExtra as exc:
        raise click.UsageError(str(exc)) from None


serve = click.command("serve")(_serve)

if __name__ == "__main__":  # python -m orchestrator.server.cli
    serve()
