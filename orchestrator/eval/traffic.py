"""Each eval run's provider traffic goes to its own model source and its own cassette.

`Recorder` and `Replayer` patch httpx for the whole process, which fits one
session at a time. An eval runs several at once, so it installs one patch of
its own for the duration, and routes each request by the run it was made from:
a context variable set in the run's task, which the thread's execution task
(and the tools it starts) inherit. A run's requests are answered by its router
(a scripted model, a replayed cassette) or, live, by the network; with a
recorder they are recorded too. Requests made outside any run are untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx
import respx
from respx.models import PassThrough

from providers.cassette import Recorder

__all__ = ["OfflineRequest", "RunTraffic", "routing", "traffic_of"]


class OfflineRequest(ConnectionError):
    """An offline run asked for something its cassette or script does not have."""


@dataclass
class RunTraffic:
    router: respx.Router | None = None  # answers the run's requests; None: the network (live)
    recorder: Recorder | None = None  # records them as well


_CURRENT: ContextVar[RunTraffic | None] = ContextVar("orchestrator_eval_run", default=None)
_installed = 0
_AsyncSend = Callable[[httpx.AsyncHTTPTransport, httpx.Request], Coroutine[Any, Any, httpx.Response]]
_SyncSend = Callable[[httpx.HTTPTransport, httpx.Request], httpx.Response]
_originals: tuple[_AsyncSend, _SyncSend] | None = None


def _refuse(request: httpx.Request) -> OfflineRequest:
    return OfflineRequest(f"offline run: nothing recorded or scripted answers {request.method} {request.url}")


# Installed as the transports' methods, so the transport is their `self`.
async def _handle_async(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
    assert _originals is not None
    run = _CURRENT.get()
    if run is None:
        return await _originals[0](self, request)
    if run.router is None:
        response = await _originals[0](self, request)
    else:
        try:
            response = await run.router.async_handler(request)
        except PassThrough:
            raise _refuse(request) from None
    return run.recorder.capture(request, response) if run.recorder else response


def _handle_sync(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
    assert _originals is not None
    run = _CURRENT.get()
    if run is None or run.router is None:
        response = _originals[1](self, request)
    else:
        try:
            response = run.router.handler(request)
        except PassThrough:
            raise _refuse(request) from None
    return run.recorder.capture(request, response) if run and run.recorder else response


@contextmanager
def routing() -> Iterator[None]:
    """Install the per-run switch (nestable; removed when the outermost exits)."""
    global _installed, _originals
    if _installed == 0:
        _originals = (httpx.AsyncHTTPTransport.handle_async_request, httpx.HTTPTransport.handle_request)
        httpx.AsyncHTTPTransport.handle_async_request = _handle_async  # type: ignore[method-assign]
        httpx.HTTPTransport.handle_request = _handle_sync  # type: ignore[method-assign]
    _installed += 1
    try:
        yield
    finally:
        _installed -= 1
        if _installed == 0 and _originals is not None:
            async_original, sync_original = _originals
            # restoring a saved method: mypy takes the saved callable for one missing its `self`
            httpx.AsyncHTTPTransport.handle_async_request = async_original  # type: ignore[method-assign,assignment]
            httpx.HTTPTransport.handle_request = sync_original  # type: ignore[method-assign,assignment]
            _originals = None


@contextmanager
def traffic_of(run: RunTraffic) -> Iterator[RunTraffic]:
    """Within this block (and tasks started in it), requests belong to `run`."""
    token = _CURRENT.set(run)
    try:
        yield run
    finally:
        _CURRENT.reset(token)
