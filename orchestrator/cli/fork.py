"""`orchestrator fork THREAD --at SEQ` and `orchestrator rewind THREAD --to SEQ` (docs/guide.md, "Time travel").

Both open the project's runtime on the storage the config names (or `--db`), do the one operation
and print the result; a bad point prints the nearest valid ones.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

_F = TypeVar("_F", bound=Callable[..., Any])

_DEFAULT_PATH = "agents"
_DEFAULT_CONFIG = "configs/default.yaml"


def _options(command: _F) -> _F:
    """The options both commands share."""
    for option in reversed(
        [
            click.option("--path", default=_DEFAULT_PATH, show_default=True, help="The definitions folder."),
            click.option("--config", "configs", multiple=True, default=[_DEFAULT_CONFIG], show_default=True),
            click.option("--db", help="Storage URL or SQLite path (default: the config's runtime.storage)."),
            click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        ]
    ):
        command = option(command)
    return command


@click.command()
@click.argument("thread")
@click.option("--at", "at", type=click.IntRange(min=1), required=True, help="The message seq the fork ends at.")
@_options
def fork(thread: str, at: int, path: str, configs: tuple[str, ...], db: str | None, as_json: bool) -> None:
    """Fork THREAD at message SEQ: a new thread with its history, values, env and files as of then."""
    from orchestrator.cli.errors import errors_as_messages

    with errors_as_messages(traceback=False):
        record = asyncio.run(_fork(thread, at, path, configs, db))
        if as_json:
            click.echo(json.dumps({"id": record[0], "forked_from": thread, "forked_at": at}))
        else:
            click.echo(f"{record[0]} (forked from {thread} at message {at}; next turn: side {record[1]})")


@click.command()
@click.argument("thread")
@click.option("--to", "to", type=click.IntRange(min=1), required=True, help="The message seq to continue from.")
@_options
def rewind(thread: str, to: int, path: str, configs: tuple[str, ...], db: str | None, as_json: bool) -> None:
    """Rewind THREAD to message SEQ: later messages, values and events are kept, marked superseded."""
    from orchestrator.cli.errors import errors_as_messages

    with errors_as_messages(traceback=False):
        superseded = asyncio.run(_rewind(thread, to, path, configs, db))
        if as_json:
            click.echo(json.dumps({"id": thread, "to": to, "superseded": superseded}))
        else:
            click.echo(f"{thread} rewound to message {to} ({superseded} later messages superseded)")


async def _fork(thread_id: str, at: int, path: str, configs: tuple[str, ...], db: str | None) -> tuple[str, str]:
    from orchestrator.runtime import Runtime

    async with Runtime.from_path(path, config=list(configs), storage=db) as runtime:
        forked = await (await runtime.get_thread(thread_id)).fork(at)
        execution = forked.record.execution
        return forked.id, execution.current_side if execution is not None else "a"


async def _rewind(thread_id: str, to: int, path: str, configs: tuple[str, ...], db: str | None) -> int:
    from orchestrator.runtime import Runtime

    async with Runtime.from_path(path, config=list(configs), storage=db) as runtime:
        return await (await runtime.get_thread(thread_id)).rewind(to)
