"""Attack: slow clients starve the server (issue 15, item 4).

Connections that send nothing, half a header or a body a byte at a time
stayed open (75 s and counting); 21,000 of them exhausted file descriptors
and real requests timed out. Now a request must arrive within the request
deadline, connections beyond the cap are closed at once, and real requests
are served while 2,000 idle connections are held. All on loopback.
"""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.testing import LiveServer

IDLE = 2_000
DEADLINE = 1.5


@pytest.fixture(scope="module", autouse=True)
def _descriptors() -> Iterator[None]:
    """Client and server ends of 2,000 sockets live in this one process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 3 * IDLE + 512
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"needs {want} file descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setblocking(True)
    return sock


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_idle_and_half_sent_requests_are_closed_within_the_deadline(runtime: Runtime) -> None:
    app = create_app(runtime)
    with LiveServer(app, request_timeout=DEADLINE) as server:
        silent = _connect(server.port)
        half_header = _connect(server.port)
        half_header.sendall(b"GET /agents HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        slow_body = _connect(server.port)
        slow_body.sendall(
            b"PUT /threads/x/values/k HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        kept_alive = _connect(server.port)
        kept_alive.sendall(b"GET /agents HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert b"200 OK" in kept_alive.recv(65536)
        kept_alive.sendall(b"GET /agents HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the next request, never finished
        started = time.monotonic()
        for sock in (silent, half_header, slow_body, kept_alive):
            assert _closed_by_server(sock, within=DEADLINE + 5), "the server kept a slow connection open"
            sock.close()
        assert time.monotonic() - started < DEADLINE + 5


def test_real_requests_are_served_while_2000_idle_connections_are_held(runtime: Runtime) -> None:
    app = create_app(runtime)
    with LiveServer(app, request_timeout=30) as server:
        idle = [_connect(server.port) for _ in range(IDLE)]
        for sock in idle[::2]:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # half of them half a header
        try:
            with httpx.Client(base_url=server.url, timeout=10) as client:
                for _ in range(20):
                    assert client.get("/agents").status_code == 200
        finally:
            for sock in idle:
                sock.close()


def test_connections_beyond_the_cap_are_closed_at_once(runtime: Runtime) -> None:
    app = create_app(runtime)
    with LiveServer(app, max_connections=20) as server:
        held = [_connect(server.port) for _ in range(20)]
        time.sleep(0.2)  # let the server accept them (real sockets: no fake clock for the kernel)
        extra = _connect(server.port)
        assert _closed_by_server(extra, within=5)
        extra.close()
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 5
        while True:  # the cap frees up as connections go
            try:
                if httpx.get(server.url + "/agents", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not serve again once connections were released"
            time.sleep(0.05)
