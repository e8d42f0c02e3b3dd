"""Errors a person can act on, printed as one block instead of a traceback.

Config, definition, alias and provider errors already say where (file, line,
field) and what is wrong; the command adds what to do next and exits 1. With
`--traceback` (or debug logging) the exception propagates unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import click

__all__ = ["errors_as_messages"]

_TRACEBACK_HINT = "(run again with --traceback for the full traceback)"


@contextlib.contextmanager
def errors_as_messages(*, traceback: bool) -> Iterator[None]:
    try:
        yield
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
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
    from providers.config import ConfigError
    from providers.stream import ProviderError

    if isinstance(exc, ConfigError):
        return f"{exc}\nFix the config file named above (docs/providers.md lists every field).", True
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
    return f"{type(exc).__name__}: {exc}", isinstance(exc, NothingToSend)


def _provider_hint(message: str) -> str:
    if "environment variable" in message and "is not set" in message:
        return "Set that variable, or run offline with --model test."
    if "authentication failed" in message:
        return "Check the key, or run offline with --model test."
    return "Retry later, pick another alias with --model, or run offline with --model test."
