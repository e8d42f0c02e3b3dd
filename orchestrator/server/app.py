"""`create_app(runtime)`: the FastAPI app serving the API, the WebSocket and the page.

The app owns the background executions it starts (see `runs.py`) and stops
them on shutdown. Everything else lives in the runtime: the app is a thin,
authenticated face over `Runtime` and `Thread`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from orchestrator.runtime import Runtime
from orchestrator.server import agui, files, routes, waiting_routes, ws
from orchestrator.server import docs as api_docs
from orchestrator.server.auth import Authenticator, load_tokens
from orchestrator.server.errors import install_error_handlers
from orchestrator.server.guard import SiteGuard
from orchestrator.server.limits import BodyLimit
from orchestrator.server.runs import QueuedRuns

if TYPE_CHECKING:
    from orchestrator.temporal import TemporalOptions, ThreadRequests

STATIC = Path(__file__).parent / "static"


async def _requests(options: TemporalOptions) -> ThreadRequests:
    from orchestrator.temporal import ThreadRequests, connect

    return ThreadRequests(await connect(options), options)


def create_app(
    runtime: Runtime,
    *,
    tokens: Mapping[str, str] | None = None,
    max_body_bytes: int = 1_000_000,
    own_runtime: bool = False,
    temporal: TemporalOptions | None = None,
    broker: Any = None,
    allowed_hosts: Sequence[str] | None = None,
    allowed_origins: Sequence[str] = (),
    docs: bool = False,
) -> FastAPI:
    """The server for `runtime`. Tokens (`{token: user_id}`) join those of env
    ORCHESTRATOR_TOKENS; with none at all the server is open. `own_runtime`:
    close the runtime when the app shuts down (the CLI's case). With `temporal`
    (where the Temporal service is) and `broker` (a RedisBroker), workers run
    the executions and this process only serves (see docs/deployment.md).
    `allowed_hosts`: the `Host` names served (None: any; `orchestrator serve`
    passes the loopback names when bound to loopback); `allowed_origins`:
    other origins whose pages may write and open sockets (see guard.py); `docs`: serve the API's
    Swagger UI at `/docs` (see docs.py; FastAPI's own `/docs` and `/redoc` are never served)."""
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
    if (temporal is None) != (broker is None):
        raise ValueError("create_app: pass both temporal and broker (workers run executions) or neither")
    state = routes.ServerState(runtime, Authenticator(load_tokens(tokens)))
    app = FastAPI(
        title="orchestrator",
        version=_version(),
        lifespan=_lifespan(state, own_runtime=own_runtime, temporal=temporal, broker=broker),
        description="Create threads, run two-sided agents and watch them on a WebSocket (`/threads/{id}/events`).",
        docs_url=None,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.state.server = state
    install_error_handlers(app)
    app.include_router(routes.router)
    app.include_router(ws.router)
    app.include_router(files.router)
    app.include_router(agui.router)  # AG-UI frontends (the agui extra)
    app.include_router(waiting_routes.router)
    if docs:
        app.include_router(api_docs.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(SiteGuard, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins)  # outermost
    app.state.allowed_origins = tuple(allowed_origins)
    return app


def _lifespan(
    state: routes.ServerState, *, own_runtime: bool, temporal: TemporalOptions | None, broker: Any
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Open the runtime (and, with Temporal, the queue of runs) when the app starts; shut the runs down,
    and close what is ours, when it stops."""
    runtime = state.runtime

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.open()
        for token in state.auth.secrets():
            runtime.services.redactor.add(token)
        if temporal is not None:
            state.runs = QueuedRuns(runtime, await _requests(temporal), broker)
            if own_runtime:  # the CLI's broker: ours to open and close
                await broker.open()
                runtime.services.bus.use_broker(broker)
        try:
            yield
        finally:
            await state.runs.shutdown()
            if own_runtime:
                if temporal is not None:
                    await broker.close()
                await runtime.close()

    return lifespan


def _version() -> str:
    try:
        return version("orchestrator")
    except PackageNotFoundError:  # pragma: no cover - running from a plain checkout
        return "0"
