"""`LiveServer`: a real uvicorn server on a free 127.0.0.1 port, in a thread.

For tests and scripts that need a real socket (browsers, fuzzers speaking
`requests`) while staying in one process, so a respx-served scripted model
mounted by the caller answers the server's model requests too.

    with scripted_model(DEMO_SCRIPT).serving(), LiveServer(create_app(runtime)) as server:
        requests.get(server.url + "/agents")
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any


class LiveServer:
    def __init__(self, app: Any, *, startup_timeout: float = 30.0, **limits: Any) -> None:
        """`limits`: `request_timeout`, `max_connections` (see `serving.server_config`)."""
        import uvicorn

        from orchestrator.server.serving import server_config

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        config = server_config(app, lifespan="on", **limits)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True, name="live-server"
        )
        self._timeout = startup_timeout

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:  # set by uvicorn once the lifespan has started
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"live server on port {self.port} did not start")
            time.sleep(0.02)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()
