"""The JSON frames between `python.py` (host), the fork server and its children (`_child.py`).

TypedDicts, not models: `_child.py` runs with the stdlib only and imports this module for type
checking alone, so the shapes are written once for both sides. The fork server is the host's
own code, so its frames are trusted as they are; what a *guest* writes is validated by the host
(`python._GuestResult`).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class RunHeader(TypedDict):
    """host -> server: start a run (a frame with the `GuestRequest` follows). Limits only, no guest data."""

    op: Literal["run"]
    timeout: float
    memory_limit: int
    result_limit: int


class AbortMessage(TypedDict):
    """host -> server, while a run is in flight: kill the child."""

    op: Literal["abort"]


HostMessage = RunHeader | AbortMessage


class ReadyMessage(TypedDict):
    """server -> host, once: the stdlib is imported and the server takes runs."""

    op: Literal["ready"]
    pid: int


class DoneHeader(TypedDict):
    """server -> host, per run (a frame with the child's raw bytes follows)."""

    op: Literal["done"]
    verdict: Literal["timeout", "aborted", "too_large"] | None
    status: int  # the child's wait status
    maxrss: int  # bytes


ServerMessage = ReadyMessage | DoneHeader


class GuestRequest(TypedDict):
    """What only the forked child decodes: the guest's code and inputs."""

    source: str
    fn: str
    args: list[Any]
    imports: list[str]
    globals: dict[str, Any]
    modules: dict[str, str]
    entry: str
    console_limit: int


class GuestOutcome(TypedDict):
    """What the child reports for the guest (the host validates it as `python._GuestResult`)."""

    status: Literal["ok", "error", "oom"]
    value: NotRequired[Any]
    error: NotRequired[str]
    stack: NotRequired[str]
    console: NotRequired[str]
    console_truncated: NotRequired[bool]
