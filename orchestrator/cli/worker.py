"""`orchestrator worker`: a Temporal worker that runs executions.

Registered by orchestrator/cli/main.py as `main.add_command(worker)`. Imports the
runtime only when the command runs, so `orchestrator --help` stays fast.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.options import config_option, path_option, redis_option, temporal_options


@click.command("worker")
@path_option
@config_option
@click.option("--storage", envvar="ORCHESTRATOR_STORAGE", help="postgresql://... URL (env ORCHESTRATOR_STORAGE).")
@redis_option
@temporal_options(required=True)
@click.option(
    "--concurrency", default=8, show_default=True, type=click.IntRange(1), help="Executions run at once by this worker."
)
@click.option(
    "--sticky-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds a dead worker's cached workflow tasks wait before any worker takes them.",
)
@click.option("--lease-ttl", type=click.FloatRange(0.1), help="Override the runtime's lease_ttl (seconds).")
@click.option(
    "--drain-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="On SIGTERM, seconds to let running executions finish.",
)
def worker(
    path: Path,
    config: tuple[str, ...],
    storage: str | None,
    redis: str | None,
    temporal: str,
    namespace: str,
    task_queue: str,
    heartbeat_timeout: float,
    concurrency: int,
    sticky_timeout: float,
    lease_ttl: float | None,
    drain_timeout: float,
) -> None:
    """Run executions handed out by Temporal, until SIGTERM or Ctrl-C.

    Start as many as you like, on one machine or many, against the same
    Temporal namespace and task queue, the same database (and Redis, so
    clients on any server see the events live).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    url = storage or os.environ.get("ORCHESTRATOR_STORAGE")
    if not url or not url.startswith(("postgresql://", "postgres://")):
        raise click.BadParameter(
            f"workers share a PostgreSQL database: expected postgresql://..., got {url!r}", param_hint="--storage"
        )
    from orchestrator.core.extras import MissingExtra, missing_extra_message, require

    try:
        from orchestrator.temporal import TemporalOptions
    except ImportError:
        raise click.UsageError(missing_extra_message("orchestrator worker", "temporal")) from None
    try:  # PostgreSQL storage, and Redis events when asked for: both come with the postgres extra
        for module in ("asyncpg", "redis.asyncio"):
            require(module, feature="orchestrator worker", extra="postgres")
    except MissingExtra as exc:
        raise click.UsageError(str(exc)) from None
    options = TemporalOptions(
        address=temporal, namespace=namespace, task_queue=task_queue, heartbeat_timeout=heartbeat_timeout
    )
    settings = {"concurrency": concurrency, "sticky_timeout": sticky_timeout, "drain_timeout": drain_timeout}
    asyncio.run(_serve(path, list(config), url, redis, options, lease_ttl, settings))


async def _serve(
    path: Path,
    config: list[Path | str],
    url: str,
    redis_url: str | None,
    options: Any,
    lease_ttl: float | None,
    settings: dict[str, Any],
) -> None:
    from orchestrator.runtime import Runtime
    from orchestrator.storage.broker import RedisBroker
    from orchestrator.temporal import TemporalUnavailable
    from orchestrator.temporal.worker import Worker

    runtime = Runtime.from_path(path, config=config, storage=url)
    if lease_ttl is not None:
        runtime.settings = runtime.settings.model_copy(update={"lease_ttl": lease_ttl})
    redis_url = redis_url or runtime.settings.redis
    broker = RedisBroker(redis_url) if redis_url else None
    worker = Worker(runtime, options, broker=broker, **settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await worker.run(stop)
    except TemporalUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if broker is not None:
            await broker.close()
        await runtime.close()
