"""Errors a person can act on, printed as one block instead of a traceback.

Config, definition, alias and provider errors already say where (file, line,
field) and what is wrong; the command adds what to do next and exits 1. With
`--traceback` (or debug logging) the exception propagates unchanged.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from typing import NoReturn

import click

__all__ = ["OUTPUT_CLOSED_STATUS", "OutputClosed", "errors_as_messages", "exit_output_closed"]

_TRACEBACK_HINT = "(run again with --traceback for the full traceback)"

#: What a shell reports for a process SIGPIPE ended (128 + 13): `cmd | head -1` under `set -o pipefail`
#: fails as it does for `yes | head -1`; without pipefail the pipeline's status is head's.
OUTPUT_CLOSED_STATUS = 141


class OutputClosed(Exception):
    """The output's reader went away (a closed pipe): nothing more can be shown."""


def exit_output_closed() -> NoReturn:
    """End the process as a Unix tool does when its reader goes away: silently, status 141.

    `os._exit` rather than `SystemExit`: the command's LiteLLM import thread may still hold import locks,
    and the interpreter's finalization beside it can wait on one forever (3 runs in 20 hung so). Whatever
    had to be stored was stored before this is called (the runtime is closed)."""
    try:
        sys.stderr.flush()
    except OSError:  # stderr may be the same closed pipe
        pass
    os._exit(OUTPUT_CLOSED_STATUS)


@contextlib.contextmanager
def errors_as_messages(*, traceback: bool) -> Iterator[None]:
    try:
        yield
    except (click.ClickException, click.exceptions.Exit, click.Abort, OutputClosed, BrokenPipeError):
        raise  # a closed output is no error to explain: the command group ends the process quietly
    except Exception as exc:
        if traceback:
            raise
        message, expected = _message(exc)
        raise click.ClickException(message if expected else f"{message}\n{_TRACEBACK_HINT}") from None


def _message(exc: Exception) -> tuple[str, bool]:
    """The text, and whether the error is an expected one (its traceback would not help)."""
    from orchestrator.cli.session import NothingToSend
    from orchestrator.core.extras import MissingExtra
    from orchestrator.definitions.define import DefinitionError
    from orchestrator.definitions.loader import LoadError
    from orchestrator.engine.executor import ExecutionFailed
    from orchestrator.storage.base import ThreadBusyError
    from orchestrator.storage.history import HistoryPointError
    from providers.config import ConfigError
    from providers.stream import ProviderError

    if isinstance(exc, ConfigError):
        return f"{exc}\n{_config_hint(str(exc))}", True
    if isinstance(exc, LoadError):
        return f"{exc}\n`orchestrator check` lists these problems (and more) without running anything.", True
    if isinstance(exc, DefinitionError):
        return f"{exc}\n`orchestrator check --config FILE` reports this before a run.", True
    if isinstance(exc, (ExecutionFailed, ProviderError)):
        return f"the model call failed: {exc}\n{_provider_hint(str(exc))}", True
    if isinstance(exc, MissingExtra):  # the message says what to install
        return str(exc), True
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0]), True
    if isinstance(exc, (HistoryPointError, ThreadBusyError)):  # a fork or rewind's point or a busy thread
        return str(exc), True
    return f"{type(exc).__name__}: {exc}", isinstance(exc, NothingToSend)


def _config_hint(message: str) -> str:
    """What to do next; "the config file named above" only when the message names one."""
    if message.startswith("--model "):
        return "Pass an alias the config defines, or an offline model: test, a script (turns.yaml) or module:function."
    if "environment variable" in message and "is not set" in message:
        return "Set that variable, or run offline with --model test."
    if re.search(r"(, line \d+|: cannot read providers config|: not UTF-8 text)", message):
        return "Fix the config file named above (docs/providers.md lists every field)."
    return "docs/providers.md describes the config: its providers, models and default_model."


def _provider_hint(message: str) -> str:
    if "environment variable" in message and "is not set" in message:
        return "Set that variable, or run offline with --model test."
    if "authentication failed" in message:
        return "Check the key, or run offline with --model test."
    return "Retry later, pick another alias with --model, or run offline with --model test."
