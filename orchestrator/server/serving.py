"""How the server holds connections: a deadline to receive a request and a connection cap.

uvicorn (0.54) has no header-read timeout: `timeout_keep_alive` is armed only
after a response and cancelled by the first byte of the next request, so a
connection that sends nothing, or half a header, or a body a byte a minute,
stays open for good; `limit_concurrency` answers 503 to new requests once
that many connections are open, which lets idle sockets lock real clients
out. (hypercorn and granian do not bound header reading either; the known
fix is a request deadline in the protocol, as here.)

`GuardedH11` is uvicorn's h11 protocol with:

- a request deadline: from the moment a connection opens, or the first byte
  of a kept-alive connection's next request, the whole request (head and
  body) must arrive within `request_timeout` seconds, or the connection is
  closed. It is disarmed once the request is in (a slow response or a
  WebSocket is not limited by it);
- a connection cap: a connection beyond `max_connections` is closed at once,
  so file descriptors run out for no one; the cap is kept under the process's
  descriptor limit.

A proxy in front (nginx `client_header_timeout`, `limit_conn`) is still the
place for per-address limits; see docs/security.md.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_TIMEOUT = 10.0
MAX_CONNECTIONS = 4096
_RESERVED_FDS = 256  # files, the database, the model client: never handed to clients
_RECEIVING = (h11.IDLE, h11.SEND_BODY)  # the client has not finished sending its request


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a request deadline and a connection cap (set by `guarded_protocol`)."""

    request_timeout: float = REQUEST_TIMEOUT
    max_connections: int = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.abort()  # connection_lost removes it from the count
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request on a kept-alive connection starts its clock
        super().data_received(data)
        if self.conn.their_state not in _RECEIVING or self.transport.get_protocol() is not self:
            self._disarm()  # the request is in, or the connection became a WebSocket

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return
        if self.conn.their_state in _RECEIVING:
            self.transport.abort()


def guarded_protocol(
    request_timeout: float = REQUEST_TIMEOUT, max_connections: int = MAX_CONNECTIONS
) -> type[GuardedH11]:
    """A `GuardedH11` with these limits (uvicorn's `http=` takes a class)."""
    if request_timeout <= 0:
        raise ValueError(f"request_timeout must be positive, got {request_timeout}")
    if max_connections < 1:
        raise ValueError(f"max_connections must be at least 1, got {max_connections}")
    attrs = {"request_timeout": float(request_timeout), "max_connections": _fit_to_fd_limit(max_connections)}
    return type("GuardedH11", (GuardedH11,), attrs)


def _fit_to_fd_limit(wanted: int) -> int:
    """Raise the soft descriptor limit toward what `wanted` connections need; cap them to what is available."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + _RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - _RESERVED_FDS))


def server_config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    request_timeout: float = REQUEST_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    log_level: str = "warning",
    access_log: bool = False,
    **extra: Any,
) -> uvicorn.Config:
    """The uvicorn settings `orchestrator serve` and `LiveServer` share."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(request_timeout, max_connections),
        ws_max_size=64 * 1024,
        timeout_keep_alive=5,
        log_level=log_level,
        access_log=access_log,
        **extra,
    )
