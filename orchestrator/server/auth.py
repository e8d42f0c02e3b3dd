"""Bearer tokens: who is calling, and whether they may see a thread.

Tokens map to user ids (`{"tokenA": "userA"}`), from the app factory's
`tokens=` and/or env `ORCHESTRATOR_TOKENS="tokenA:userA,tokenB:userB"`.
With no token configured at all the server is open (local use): every caller
is anonymous and sees every thread.

Browsers cannot set headers on a WebSocket, so a socket may also present its
token as the subprotocol pair `["bearer", TOKEN]`. Tokens are never accepted
in the URL, where access logs would keep them.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from orchestrator.server.errors import ApiError

TOKENS_ENV = "ORCHESTRATOR_TOKENS"
WS_PROTOCOL = "bearer"


@dataclass(frozen=True)
class Principal:
    user_id: str | None  # None: auth is off (open server)


def parse_tokens(spec: str) -> dict[str, str]:
    """`"tokenA:userA,tokenB:userB"` -> mapping; the error never echoes a token."""
    tokens: dict[str, str] = {}
    for i, item in enumerate(part.strip() for part in spec.split(",")):
        if not item:
            continue
        token, sep, user = item.partition(":")
        if not sep or not token.strip() or not user.strip():
            raise ValueError(f"{TOKENS_ENV}: entry {i + 1} must be TOKEN:USER (comma-separated)")
        tokens[token.strip()] = user.strip()
    return tokens


def load_tokens(explicit: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    tokens = parse_tokens(env.get(TOKENS_ENV, ""))
    tokens.update(explicit or {})
    return tokens


class Authenticator:
    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._tokens = dict(tokens)

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def secrets(self) -> list[str]:
        return list(self._tokens)

    def principal(self, conn: HTTPConnection) -> Principal:
        """The caller, from `Authorization: Bearer` or (sockets) the bearer subprotocol."""
        if not self.enabled:
            return Principal(None)
        token = _bearer(conn.headers.get("authorization")) or _subprotocol_token(conn)
        if token is None:
            raise ApiError(401, "unauthorized", "missing bearer token: send the header 'Authorization: Bearer TOKEN'")
        for known, user in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return Principal(user)
        raise ApiError(401, "unauthorized", "invalid bearer token")

    def may_see(self, principal: Principal, owner: str | None) -> bool:
        return not self.enabled or principal.user_id == owner


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


def _subprotocol_token(conn: HTTPConnection) -> str | None:
    if conn.scope.get("type") != "websocket":
        return None
    protocols = [p.strip() for p in conn.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    if len(protocols) >= 2 and protocols[0] == WS_PROTOCOL:
        return protocols[1]
    return None
