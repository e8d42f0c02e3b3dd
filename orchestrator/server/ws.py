"""The per-thread WebSocket: `/threads/{id}/events?after=SEQ`.

Each frame is one event as JSON (`thread_id`, `seq`, `type`, `data`, `at`).
A client that reconnects with the last `seq` it saw gets what it missed, then
the live stream, each event once (the bus guarantees it; see `events.py`).
A client that falls more than `events.SUBSCRIBER_QUEUE` events behind (it
stopped reading) is closed with code 1013 and the reason
`fell behind: reconnect with after=N`, so a stalled client cannot grow the
server's memory; reconnecting with that `after` loses nothing.
Auth and ownership are checked before the handshake is accepted, so a
stranger's token gets the same HTTP 404 as on the REST routes.
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from orchestrator.runtime import Thread
from orchestrator.server.auth import WS_PROTOCOL
from orchestrator.server.errors import ApiError, error_response
from orchestrator.server.guard import origin_allowed
from orchestrator.server.routes import ServerState, find_thread
from orchestrator.storage.events import SubscriberLagging

router = APIRouter()
LAGGING_CLOSE_CODE = 1013  # "try again later": the client fell behind; reconnect with ?after=<last seq seen>


@router.websocket("/threads/{thread_id}/events")
async def thread_events(websocket: WebSocket, thread_id: str) -> None:
    srv: ServerState = websocket.app.state.server
    try:
        _check_origin(websocket)
        after = _after(websocket.query_params.get("after", "0"))
        who = srv.auth.principal(websocket)
        thread = await find_thread(srv, who, thread_id)
    except ApiError as exc:
        await _deny(websocket, exc)
        return
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
    await websocket.accept(subprotocol=WS_PROTOCOL if offered and offered[0] == WS_PROTOCOL else None)
    pump = asyncio.create_task(_pump(websocket, thread, after))
    drain = asyncio.create_task(_drain(websocket))
    try:
        await asyncio.wait({pump, drain}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pump, drain):
            task.cancel()
        for task in (pump, drain):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    with contextlib.suppress(Exception):
        await websocket.close()


def _check_origin(websocket: WebSocket) -> None:
    """A page from another origin may not open a socket here (a browser always says where it comes from)."""
    origin = websocket.headers.get("origin")
    if not origin_allowed(origin, websocket.headers.get("host"), getattr(websocket.app.state, "allowed_origins", ())):
        raise ApiError(403, "cross_origin", f"WebSocket from origin {origin[:100]!r} refused")  # type: ignore[index]


def _after(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 2**62:
        raise ApiError(422, "invalid_request", "must be a non-negative integer (the last seq you saw)", "query.after")
    return value


async def _pump(websocket: WebSocket, thread: Thread, after: int) -> None:
    try:
        async for event in thread.events(after=after):
            await websocket.send_text(event.model_dump_json())
    except SubscriberLagging as exc:  # a stalled client: its backlog is not kept; it reconnects and misses nothing
        await websocket.close(code=LAGGING_CLOSE_CODE, reason=f"fell behind: reconnect with after={exc.after}")


async def _drain(websocket: WebSocket) -> None:
    """Read (and ignore) client frames until the client goes away."""
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return


async def _deny(websocket: WebSocket, exc: ApiError) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        await websocket.send_denial_response(error_response(exc.status, exc.code, exc.message, exc.field, headers))
    else:  # server without the denial extension: close before accepting, code 4000 + HTTP status
        await websocket.close(code=4000 + exc.status, reason=exc.message[:120])
