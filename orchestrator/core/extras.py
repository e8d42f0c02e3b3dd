"""Optional dependencies (the package's extras) and the one error a missing one raises.

The base install is the runtime alone: LiteLLM, storage on SQLite, the CLI and the
offline demo. The server, PostgreSQL and Redis, the JavaScript sandbox, MCP, Temporal
and OpenTelemetry are extras, imported only where they are used. When one is missing,
the person (or the model, for `run_code`) should learn which extra to install rather
than read an ImportError traceback from deep inside the runtime, so every import site
of an optional dependency goes through `require`, and every message has one shape:

    orchestrator serve needs the server extra: pip install 'orchestrator-runtime[server]'
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["DISTRIBUTION", "MissingExtra", "missing_extra_message", "require"]

DISTRIBUTION = "orchestrator-runtime"  # the name on the package index (`orchestrator` is another project's)


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it.

    An ImportError, so hosts that already guard an optional feature with
    `except ImportError` keep working; the CLI prints it as one line, no traceback.
    """

    def __init__(self, feature: str, extra: str, module: str | None = None) -> None:
        super().__init__(missing_extra_message(feature, extra), name=module)
        self.feature = feature
        self.extra = extra


def missing_extra_message(feature: str, extra: str) -> str:
    """`feature` is what the person asked for, as they would recognise it (a command, a URL scheme)."""
    return f"{feature} needs the {extra} extra: pip install '{DISTRIBUTION}[{extra}]'"


def require(module: str, *, feature: str, extra: str) -> ModuleType:
    """Import `module`, or raise `MissingExtra` naming `extra`.

    Only a module not found (the package, or one of its own dependencies) becomes
    MissingExtra: installing the extra is the fix for both. An installed package that
    fails to import for another reason (a broken build) keeps its own error.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingExtra(feature, extra, module) from exc
