"""`orchestrator worker`: run executions taken from the PostgreSQL queue.

Registered by orchestrator/cli.py as `main.add_command(worker)`. Imports the
runtime only when the command runs, so `orchestrator --help` stays fast.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import click


def _worker(path: Path, config: tuple[Path, ...], storage: str | None, redis_url: str | None, concurrency: int,
            poll_interval: float, lease_ttl: float | None, max_attempts: int, drain_timeout: float) -> None:  # fmt: skip
    """Take executions from the queue in PostgreSQL and run them, until SIGTERM or Ctrl-C.

    Start as many as you like, on one machine or many, against the same
    database (and Redis, so clients on any server see the events live).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    url = storage or os.environ.get("ORCHESTRATOR_STORAGE")
    if not url or not url.startswith(("postgresql://", "postgres://")):
        raise click.BadParameter(
            f"workers share a PostgreSQL database: expected postgresql://..., got {url!r}", param_hint="--storage"
        )
    asyncio.run(_serve(path, list(config) or ["configs/default.yaml"], url, redis_url, concurrency, poll_interval,
                       lease_ttl, max_attempts, drain_timeout))  # fmt: skip


async def _serve(path: Path, config: list[Path | str], url: str, redis_url: str | None, concurrency: int,
                 poll_interval: float, lease_ttl: float | None, max_attempts: int, drain_timeout: float) -> None:  # fmt: skip
    from .broker import RedisBroker
    from .queue import ExecutionQueue
    from .runtime import Runtime
    from .storage.postgres import PostgresStorage
    from .worker import Worker

    runtime = Runtime.from_path(path, config=config, storage=url)
    if lease_ttl is not None:
        runtime.settings = runtime.settings.model_copy(update={"lease_ttl": lease_ttl})
    assert isinstance(runtime.storage, PostgresStorage)
    queue = ExecutionQueue.for_storage(runtime.storage, max_attempts=max_attempts)
    broker = RedisBroker(redis_url) if redis_url else None
    worker = Worker(runtime, queue, broker=broker, concurrency=concurrency, poll_interval=poll_interval, drain_timeout=drain_timeout)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await worker.run(stop)
    finally:
        await queue.close()
        if broker is not None:
            await broker.close()
        await runtime.close()


worker = click.command("worker")(
    click.option("--path", default="agents", show_default=True, type=click.Path(path_type=Path), help="The definitions folder.")(
    click.option("--config", multiple=True, type=click.Path(path_type=Path), help="Config YAML (repeatable; default configs/default.yaml).")(
    click.option("--storage", envvar="ORCHESTRATOR_STORAGE", help="postgresql://... URL (env ORCHESTRATOR_STORAGE).")(
    click.option("--redis", "redis_url", envvar="ORCHESTRATOR_REDIS", help="redis://... for cross-process events and stop/force_turn (env ORCHESTRATOR_REDIS).")(
    click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1), help="Executions run at once by this worker.")(
    click.option("--poll-interval", default=1.0, show_default=True, type=click.FloatRange(0.01), help="Seconds between queue polls when no notification arrives.")(
    click.option("--lease-ttl", type=click.FloatRange(0.1), help="Override the runtime's lease_ttl (seconds).")(
    click.option("--max-attempts", default=5, show_default=True, type=click.IntRange(1), help="Picks of one request before it is marked failed.")(
    click.option("--drain-timeout", default=30.0, show_default=True, type=click.FloatRange(0), help="On SIGTERM, seconds to let running executions finish.")(
        _worker
    ))))))))))  # fmt: skip
