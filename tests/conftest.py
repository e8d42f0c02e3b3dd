"""Shared fixtures: a runtime on a scripted model, served through respx.

Everything below goes through LiteLLM's real request building and the production stream readers:
the scripted model answers at the HTTP layer with provider bytes.
"""

from __future__ import annotations

import errno
import os
import socket

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ["ORCHESTRATOR_REQUEST_MEMO"] = "0"  # no test reads or writes ~/.cache (test_request_memo.py turns it on)
os.environ.setdefault("ORCHESTRATOR_CHECK_EVENTS", "1")  # every published event is checked against its model

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import respx

from orchestrator.core.settings import RuntimeSettings
from orchestrator.definitions.loader import Definitions
from orchestrator.runtime import Runtime
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict
from providers.scripted import ScriptedModel

ROOT = Path(__file__).resolve().parent.parent
collect_ignore_glob = ["fixtures/*"]  # example projects with tests of their own, run by the tests that use them

# -- no test touches the network ---------------------------------------------------------------
# A name lookup or a connection to anything but this machine fails at once, as on a machine without
# network, and the test that made it fails at teardown naming the host: a library phoning home from
# inside a request (LiteLLM fetching a tokenizer to price a stream, 23 s of retries; a cloud SDK probing
# a metadata address) shows up here, not as a slow test. Subprocesses the tests start are not covered.
_LOCAL_HOSTS = frozenset({"localhost", "ip6-localhost", "::1", "0.0.0.0", ""})
_looked_up: list[str] = []
_getaddrinfo = socket.getaddrinfo
_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def _refused(name: str) -> bool:
    if name in _LOCAL_HOSTS or name.startswith("127.") or name.startswith("::ffff:127."):
        return False
    _looked_up.append(name)
    return True


def _local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else str(host or "")
    if _refused(name):
        raise socket.gaierror(socket.EAI_NONAME, f"tests do not touch the network (looked up {name!r})")
    return _getaddrinfo(host, *args, **kwargs)


def _local_connect(sock: socket.socket, address: Any) -> Any:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and _refused(str(address[0])):
        raise OSError(errno.ENETUNREACH, f"tests do not touch the network (connected to {address[0]!r})")
    return _connect(sock, address)


def _local_connect_ex(sock: socket.socket, address: Any) -> Any:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and _refused(str(address[0])):
        return errno.ENETUNREACH
    return _connect_ex(sock, address)


socket.getaddrinfo = _local_only
socket.socket.connect = _local_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _local_connect_ex  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _network_closed() -> Any:
    before = len(_looked_up)
    yield
    looked_up = sorted(set(_looked_up[before:]))
    assert not looked_up, f"this test tried to reach the network: {looked_up}"


SCRIPTED_CONFIG: dict[str, Any] = {
    "providers": {"scripted": {"type": "scripted"}},
    "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
    "default_model": "demo",
}


@pytest.fixture
async def make_runtime(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """`rt, model = await make_runtime(defs, script)`: a runtime whose default model is scripted."""
    router = respx.mock(assert_all_called=False)
    router.start()
    runtimes: list[Runtime] = []

    async def factory(
        defs: Definitions,
        script: Any,
        *,
        config: dict | None = None,
        settings: RuntimeSettings | None = None,
        wire: str = "openai",
        db: str | None = None,
        storage: SQLiteStorage | None = None,
    ) -> tuple[Runtime, ScriptedModel]:
        model = ScriptedModel(script, wire=wire)  # type: ignore[arg-type]
        model.mount(router)
        runtime = Runtime(
            defs,
            config=config_from_dict(config or SCRIPTED_CONFIG),
            storage=storage or SQLiteStorage(db or str(tmp_path / f"rt{len(runtimes)}.db")),
            settings=settings or RuntimeSettings(),
        )
        await runtime.open()
        runtimes.append(runtime)
        return runtime, model

    try:
        yield factory
    finally:
        for runtime in runtimes:
            await runtime.close()
        router.stop()
