"""Keeping the server out of reach sideways: Host allow-list, same-origin writes, page headers.

An open server on loopback (no tokens) trusts whoever reaches it, so the
browser of the person running it must not become a way in for a page from
elsewhere:

- DNS rebinding: a page at `http://attacker.example:8000` whose name now
  resolves to 127.0.0.1 is same-origin with the server as far as the browser
  knows. It still sends `Host: attacker.example:8000`, so requests naming a
  host that is not allowed are refused (400) before any route runs.
- Cross-site writes: a form or a `fetch(..., {mode: "no-cors"})` from another
  site needs no preflight. Browsers send `Origin` (and `Sec-Fetch-Site`) on
  them, so a state-changing request (POST, PUT, PATCH, DELETE) from an origin
  other than the server's own, or an allowed one, is refused (403); and a
  body in one of the content types a form can send (text/plain, urlencoded,
  multipart) is refused (415): the API reads JSON only. Clients that are not
  browsers send no `Origin` and are unaffected.
- The page: a Content-Security-Policy without inline script, no framing,
  no MIME sniffing, no referrer. `/docs`, when served (docs.py), has the same
  policy, widened by the one pinned Swagger UI release it loads.

The WebSocket's Origin check lives in ws.py (`origin_allowed` here).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from orchestrator.server.docs import DOCS_PATH, SWAGGER_UI
from orchestrator.server.errors import error_response

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# img-src has blob:: the page fetches a thread's images with its token and shows them from blob: URLs it
# made itself (an <img src> cannot send the Authorization header); without it no attachment ever showed
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
DOCS_CSP = PAGE_CSP.replace("script-src 'self'", f"script-src 'self' {SWAGGER_UI}").replace(
    "style-src 'self'", f"style-src 'self' {SWAGGER_UI}"
)
_EVERY_RESPONSE = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_FORM_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")

_Scope = dict[str, Any]


def _header(scope: _Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value, "latin-1")  # ASGI header values are bytes
    return None


def _host_name(host: str) -> str:
    """`Host` without its port, lowercased (`[::1]:8000` -> `::1`)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def origin_allowed(origin: str | None, host: str | None, allowed: Iterable[str] = ()) -> bool:
    """True when a request's `Origin` is absent (not a browser), the server's own, or listed."""
    if origin is None:
        return True
    origin = origin.strip().lower()
    if origin in {o.lower().rstrip("/") for o in allowed}:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc or host is None:
        return False
    return parts.netloc == host.strip().lower()


class SiteGuard:
    """ASGI middleware applying the rules above. `allowed_hosts=None`: no Host check."""

    def __init__(
        self, app: Any, allowed_hosts: Sequence[str] | None = None, allowed_origins: Sequence[str] = ()
    ) -> None:
        self.app = app
        self.any_host = allowed_hosts is None or "*" in allowed_hosts
        self.hosts = {_host_name(h) for h in allowed_hosts or ()}
        self.origins = tuple(allowed_origins)

    async def __call__(self, scope: _Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = _header(scope, b"host")
        if not self.any_host and (host is None or _host_name(host) not in self.hosts):
            allowed = ", ".join(sorted(self.hosts))
            message = f"Host {(host or '')[:100]!r} is not served here; allowed: {allowed}"
            await self._refuse(scope, receive, send, 400, "host_not_allowed", message)
            return
        if scope["type"] == "websocket":  # its Origin is checked in ws.py, where denials are answered
            await self.app(scope, receive, send)
            return
        if scope["method"] not in _SAFE_METHODS:
            problem = self._cross_site_write(scope, host)
            if problem is not None:
                await self._refuse(scope, receive, send, *problem)
                return
        await self.app(scope, receive, _with_headers(send, scope["path"]))

    def _cross_site_write(self, scope: _Scope, host: str | None) -> tuple[int, str, str] | None:
        origin = _header(scope, b"origin")
        if not origin_allowed(origin, host, self.origins):
            return 403, "cross_origin", f"state-changing requests from origin {(origin or '')[:100]!r} are refused"
        if origin is None and (_header(scope, b"sec-fetch-site") or "same-origin") not in ("same-origin", "none"):
            return 403, "cross_origin", "state-changing requests from another site are refused"
        content_type = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if content_type in _FORM_TYPES:
            message = f"body: send JSON with 'Content-Type: application/json', not {content_type}"
            return 415, "unsupported_media_type", message
        return None

    async def _refuse(self, scope: _Scope, receive: Any, send: Any, status: int, code: str, message: str) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 4000 + status, "reason": message[:120]})
            return
        await error_response(status, code, message)(scope, receive, _with_headers(send, scope["path"]))


def _with_headers(send: Any, path: str) -> Any:
    page = path == "/" or path.startswith("/static/")
    policy = DOCS_CSP if path == DOCS_PATH else PAGE_CSP if page else None

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {k.lower() for k, _ in headers}
            headers += [(k, v) for k, v in _EVERY_RESPONSE if k not in present]
            if policy is not None:
                headers.append((b"content-security-policy", policy.encode()))
            message = {**message, "headers": headers}
        await send(message)

    return sending
