"""Structured logs (structlog), with secrets redacted before anything is written.

Every runtime registers its `SecretScopes`; the redaction processor runs last
before rendering, so no processor or caller can leak a secret into output.
A log line belongs to no one thread, so it is redacted of every secret known
(the operator's logs may over-redact; users' data never does).
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

from orchestrator.core.secrets import SecretScopes

_REDACTORS: weakref.WeakSet[SecretScopes] = weakref.WeakSet()


def register_secrets(redactor: SecretScopes) -> None:
    _REDACTORS.add(redactor)
    _install_record_factory()


def redact_text(text: str) -> str:
    for scopes in list(_REDACTORS):
        text = scopes.everywhere().text(text)
    return text


_factory_installed = False
_TRACEBACKS = logging.Formatter()  # what every stdlib formatter writes for `exc_info` (it keeps a set exc_text)


def _install_record_factory() -> None:
    """Redact stdlib `logging` records too (tools and libraries log through it)."""
    global _factory_installed
    if _factory_installed:
        return
    _factory_installed = True
    make_record = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        if any(r.everywhere().active for r in list(_REDACTORS)):
            try:
                message = record.getMessage()
            except Exception:  # a bad format string: leave it to logging to report
                return record
            redacted = redact_text(message)
            if redacted != message:
                record.msg, record.args = redacted, None
            if record.exc_info and not record.exc_text:  # a handler would format it later, unredacted
                record.exc_text = redact_text(_TRACEBACKS.formatException(record.exc_info))
            if record.stack_info:
                record.stack_info = redact_text(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)


def redact_processor(logger: Any, name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: secrets of every open runtime become `***`. Put it last before the renderer.

    A renderer turns what is not text into text after us (an exception's repr, `exc_info` into a
    traceback), where a secret would be written unredacted: those are made text here first."""
    if not any(r.everywhere().active for r in list(_REDACTORS)):
        return event_dict
    if event_dict.get("exc_info"):
        event_dict = structlog.processors.format_exc_info(logger, name, event_dict)
    event_dict = {k: v if k.startswith("_") else _as_text(v) for k, v in event_dict.items()}  # _: stdlib's meta
    for scopes in list(_REDACTORS):
        event_dict = scopes.everywhere().data(event_dict)
    return event_dict


def _as_text(value: Any) -> Any:
    """JSON-like values as they are; anything else as the repr a renderer would write for it."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {k: _as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_text(v) for v in value]
    return repr(value)


def ensure_logging() -> None:
    """Quiet, redacting defaults when the application has not configured structlog.

    structlog's own defaults print every level to stdout and know nothing of
    secrets; a library must not do either, so `Runtime.open` calls this. An
    application that configures structlog itself keeps its settings (and should
    add `redact_processor` to its processors)."""
    if not structlog.is_configured():
        configure_logging("WARNING")


def configure_logging(level: str | int = "WARNING", *, json: bool = False, stream: Any = None) -> None:
    """Configure structlog once for a process (the CLI calls this)."""
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            redact_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
