"""The click options `orchestrator serve` and `orchestrator worker` share, spelled once.

A server that hands executions to Temporal and the workers that run them must
agree on the namespace, the task queue and the heartbeat timeout, read the
same env variables and the same definitions and config; each option here is
one object both commands carry, so their names, defaults and env variables
cannot drift apart. Importing this module imports click only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

_Command = TypeVar("_Command", bound=Callable[..., Any])
DEFAULT_CONFIG = "configs/default.yaml"


def _stack(*options: Callable[[_Command], _Command]) -> Callable[[_Command], _Command]:
    """Apply `options` so `--help` lists them in the order given."""

    def apply(command: _Command) -> _Command:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


path_option = click.option(
    "--path", default="agents", show_default=True, type=click.Path(path_type=Path), help="The definitions folder."
)
config_option = click.option(
    "--config",
    multiple=True,
    default=(DEFAULT_CONFIG,),
    show_default=True,
    help="Config YAML (repeat to merge).",
)
redis_option = click.option(
    "--redis",
    envvar="ORCHESTRATOR_REDIS",
    default=None,
    metavar="URL",
    help="redis://... for events and live force-turn across processes (env ORCHESTRATOR_REDIS; "
    "default: the config's runtime.redis; a server uses it with --temporal).",
)


def temporal_options(*, required: bool) -> Callable[[_Command], _Command]:
    """`--temporal`, `--namespace`, `--task-queue`, `--heartbeat-timeout`: required on a worker, optional for serve."""
    where = "" if required else " (with --temporal)"
    return _stack(
        click.option(  # no `default`: with one (even None) click takes an empty env variable for a value
            "--temporal",
            envvar="ORCHESTRATOR_TEMPORAL",
            required=required,
            metavar="HOST:PORT",
            help="The Temporal frontend (env ORCHESTRATOR_TEMPORAL)."
            if required
            else "Workers run the executions: hand them to this Temporal service "
            "(env ORCHESTRATOR_TEMPORAL; needs --db postgresql://... and --redis).",
        ),
        click.option(
            "--namespace",
            envvar="ORCHESTRATOR_TEMPORAL_NAMESPACE",
            default="default",
            show_default=True,
            help=f"Temporal namespace (env ORCHESTRATOR_TEMPORAL_NAMESPACE){where}.",
        ),
        click.option(
            "--task-queue",
            envvar="ORCHESTRATOR_TASK_QUEUE",
            default="orchestrator",
            show_default=True,
            help=f"Temporal task queue, the same on servers and workers (env ORCHESTRATOR_TASK_QUEUE){where}.",
        ),
        click.option(
            "--heartbeat-timeout",
            default=10.0,
            show_default=True,
            type=click.FloatRange(0.1),
            help="Seconds without a heartbeat before an execution moves to another worker "
            f"(the same on servers and workers){where}.",
        ),
    )
