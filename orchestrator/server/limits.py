"""Request body size limit, as plain ASGI middleware.

The body is read (up to the limit) before the app sees it, so an oversized
request is answered 413 whatever the route, and a route never meets a body
cut short half-way through parsing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.server.errors import error_response

if TYPE_CHECKING:
    from starlette.types import Message, Receive

_Scope = dict[str, Any]


class BodyLimit:
    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: _Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client went away
                return
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, scope: _Scope, receive: Any, send: Any) -> None:
        response = error_response(413, "body_too_large", f"request body exceeds {self.max_bytes} bytes", "body")
        await response(scope, receive, send)


def _content_length(scope: _Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
