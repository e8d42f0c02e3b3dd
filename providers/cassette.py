"""Recording provider HTTP traffic to a cassette, and replaying it with respx.

Recording wraps httpx's transports (LiteLLM talks httpx once its aiohttp
transport is disabled), so it sees live providers and respx-served scripted
models alike: respx patches below the transport, the recorder above it. The
response bytes are teed as the consumer reads them, so streaming still streams.

Replay serves the recorded responses in order and checks each request against
the recorded one on method, URL and normalised JSON body. Ignored when
comparing: the body fields in `IGNORED_BODY_FIELDS` (transport options, not
content), the `key` query parameter, and all headers. Hosts not in the
cassette pass through to the network.

Secrets never reach the file: auth headers are dropped, `key=` query values
removed, and every secret value seen (plus those passed in) is replaced by
`<redacted>` anywhere in the cassette. Known limit: a secret that a model
streams back split across several SSE deltas is not recognised in the body.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import respx
from pydantic import BaseModel, Field
from respx.models import PassThrough

__all__ = [
    "Cassette",
    "CassetteMismatch",
    "IGNORED_BODY_FIELDS",
    "Interaction",
    "RecordedRequest",
    "RecordedResponse",
    "Recorder",
    "Replayer",
    "load_cassette",
    "record",
    "replay",
]

IGNORED_BODY_FIELDS = frozenset({"stream_options", "user", "metadata", "api_key"})
REDACTED = "<redacted>"
_AUTH_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization")
_KEY_PARAMS = ("key", "api_key", "api-key")
_KEPT_HEADERS = ("content-type", "retry-after", "retry-after-ms", "request-id", "x-request-id", "anthropic-version")


class CassetteMismatch(AssertionError):
    """A request during replay differs from the recorded one (or there was none left)."""


class RecordedRequest(BaseModel):
    method: str
    url: str
    body: Any = None  # parsed JSON when the body was JSON, else text


class RecordedResponse(BaseModel):
    status: int
    headers: dict[str, str] = Field(default_factory=dict)
    body: str = ""  # SSE kept as readable text
    complete: bool = True  # False when the consumer stopped reading early


class Interaction(BaseModel):
    request: RecordedRequest
    response: RecordedResponse


class Cassette(BaseModel):
    version: int = 1
    metadata: dict[str, Any] = Field(default_factory=dict)  # free for callers (e.g. expected messages)
    interactions: list[Interaction] = Field(default_factory=list)

    def save(self, path: str | Path, *, secrets: Iterable[str] = ()) -> None:
        data = _redact(self.model_dump(mode="json"), secrets)
        Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_cassette(path: str | Path) -> Cassette:
    try:
        return Cassette.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read cassette: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not a valid cassette: {exc}") from None


# -- normalising and redacting -------------------------------------------------


def _parse_body(content: bytes) -> Any:
    if not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return content.decode("utf-8", errors="replace")


def _clean_url(url: httpx.URL | str, secrets: set[str]) -> str:
    parts = urlsplit(str(url))
    query = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() in _KEY_PARAMS:
            secrets.add(value)
            continue
        query.append((key, value))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def _header_secrets(headers: httpx.Headers) -> set[str]:
    found = set()
    for name in _AUTH_HEADERS:
        value = headers.get(name)
        if value:
            found.add(value)
            found.add(value.split(" ", 1)[-1])  # "Bearer sk-..." -> "sk-..."
    return found


def _redact(data: Any, secrets: Iterable[str]) -> Any:
    """Strings redacted before the cassette is dumped; a response body is text that holds JSON (SSE), so
    each secret is also looked for as JSON writes it inside a string (`"`, `\\`, newlines, non-ASCII escaped)."""
    values = {s for s in secrets if s and len(s) >= 4}
    forms = {json.dumps(s, ensure_ascii=ascii_only)[1:-1] for s in values for ascii_only in (True, False)}
    ordered = sorted(values | forms, key=len, reverse=True)

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            for secret in ordered:
                value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(data) if ordered else data


def _comparable(body: Any) -> Any:
    if isinstance(body, dict):
        return {k: _comparable(v) for k, v in body.items() if k not in IGNORED_BODY_FIELDS}
    if isinstance(body, list):
        return [_comparable(v) for v in body]
    return body


def _first_difference(expected: Any, got: Any, path: str = "$") -> str | None:
    if isinstance(expected, dict) and isinstance(got, dict):
        for key in list(expected) + [k for k in got if k not in expected]:
            if key not in got:
                return f"{path}.{key}: expected {_short(expected[key])}, got nothing (field missing)"
            if key not in expected:
                return f"{path}.{key}: expected nothing, got {_short(got[key])}"
            found = _first_difference(expected[key], got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list):
        for i, (a, b) in enumerate(zip(expected, got, strict=False)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(got):
            return f"{path}: expected {len(expected)} items, got {len(got)}"
        return None
    if isinstance(expected, str) and isinstance(got, str) and REDACTED in expected:
        pattern = ".+?".join(re.escape(part) for part in expected.split(REDACTED))
        if re.fullmatch(pattern, got, flags=re.DOTALL):
            return None  # a secret removed at recording time matches whatever stands there now
    return None if expected == got else f"{path}: expected {_short(expected)}, got {_short(got)}"


def likely_cause(difference: str, expected: Any, got: Any) -> str:
    """Why a replayed request differs from the recorded one, in the terms a person changes."""
    path = difference.split(":", 1)[0]
    if path.startswith("$.model"):
        return "a different model or model alias than when it was recorded (the prompt's model, --model, the config)"
    tool = re.match(r"\$\.tools\[(\d+)\]", path)
    if tool:
        name = _at(expected, "tools", int(tool.group(1)), "function", "name") or _at(
            expected, "tools", int(tool.group(1)), "name"
        )
        return f"tool {name!r}: its description or argument schema changed since the recording"
    if path.startswith("$.tools"):
        return "the tools offered changed (a tool added to or removed from the prompt's tools)"
    errors = [e for e in _tool_errors(got) if e not in _tool_errors(expected)]  # new this time
    if errors:
        return f"a tool returned an error this time ({errors[0]}): a missing env value or service?"
    message = re.match(r"\$\.messages\[(\d+)\]", path)
    if message:
        role = _at(expected, "messages", int(message.group(1)), "role")
        return {
            "system": "the system prompt changed since the recording (the prompt's text or its variables)",
            "tool": "a tool returned a different result than at recording",
            "user": "the person's message, or the other side's text, differs from the recording",
        }.get(str(role), "the conversation took another path than the recording")
    return "the request changed; if that is intended, record again (--record-mode=all)"


def _at(data: Any, *keys: Any) -> Any:
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _tool_errors(body: Any) -> list[str]:
    """Tool results in a request that read like failures (what the runtime writes for a failed tool)."""
    found = []
    for message in _at(body, "messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if (
            message.get("role") == "tool"
            and isinstance(content, str)
            and re.search(r"\bneeds env value\b|\bis not set\b|\bfailed: \w+Error\b|\btimed out after\b", content)
        ):
            found.append(_short(content, 120))
    return found


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# -- recording -----------------------------------------------------------------


class _Tee(httpx.AsyncByteStream, httpx.SyncByteStream):
    """Pass the response bytes through while keeping a copy for the cassette."""

    def __init__(self, inner: Any, response: RecordedResponse):
        self._inner = inner
        self._response = response
        self._chunks: list[bytes] = []
        response.complete = False

    def _finish(self, complete: bool) -> None:
        self._response.body = b"".join(self._chunks).decode("utf-8", errors="replace")
        self._response.complete = self._response.complete or complete

    # Each pass starts the copy afresh: the openai SDK reads a (re-iterable, when
    # mocked) body twice, and a cassette must hold it once.
    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._chunks = []
        async for chunk in self._inner:
            self._chunks.append(chunk)
            self._finish(False)
            yield chunk
        self._finish(True)

    def __iter__(self) -> Iterator[bytes]:
        self._chunks = []
        for chunk in self._inner:
            self._chunks.append(chunk)
            self._finish(False)
            yield chunk
        self._finish(True)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()


class Recorder(AbstractAsyncContextManager["Recorder"], AbstractContextManager["Recorder"]):
    """Records every httpx request made while active; writes the cassette on exit."""

    def __init__(self, path: str | Path, *, secrets: Iterable[str] = (), metadata: dict[str, Any] | None = None):
        self.path = Path(path)
        self.cassette = Cassette(metadata=dict(metadata or {}))
        self._secrets: set[str] = {s for s in secrets if s}
        self._originals: tuple[Any, Any] | None = None

    def start(self) -> None:
        recorder = self
        async_original = httpx.AsyncHTTPTransport.handle_async_request
        sync_original = httpx.HTTPTransport.handle_request

        # installed as the transports' methods: the transport is their `self`
        async def handle_async(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
            response = await async_original(self, request)
            return recorder._capture(request, response)

        def handle_sync(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
            return recorder._capture(request, sync_original(self, request))

        self._originals = (async_original, sync_original)
        httpx.AsyncHTTPTransport.handle_async_request = handle_async  # type: ignore[method-assign]
        httpx.HTTPTransport.handle_request = handle_sync  # type: ignore[method-assign]

    def stop(self) -> None:
        if self._originals is None:
            return
        httpx.AsyncHTTPTransport.handle_async_request, httpx.HTTPTransport.handle_request = self._originals  # type: ignore[method-assign]
        self._originals = None
        self.cassette.save(self.path, secrets=self._secrets)

    def capture(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        """Record one exchange a caller routed itself, without `start()` (e.g. an eval whose
        concurrent runs each keep their own cassette); returns the response to hand on."""
        return self._capture(request, response)

    def save(self) -> None:
        """Write the cassette, secrets removed (what `stop()` does after `start()`)."""
        self.cassette.save(self.path, secrets=self._secrets)

    def _capture(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        self._secrets |= _header_secrets(request.headers)
        url = _clean_url(request.url, self._secrets)
        recorded = RecordedResponse(
            status=response.status_code,
            headers={k: v for k, v in response.headers.items() if k.lower() in _KEPT_HEADERS},
        )
        body = _parse_body(request.content) if isinstance(request.stream, httpx.ByteStream) else None
        self.cassette.interactions.append(
            Interaction(request=RecordedRequest(method=request.method, url=url, body=body), response=recorded)
        )
        response.stream = _Tee(response.stream, recorded)
        return response

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Recorder:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()


def record(path: str | Path, *, secrets: Iterable[str] = (), metadata: dict[str, Any] | None = None) -> Recorder:
    """`async with record("x.json", secrets=[token]):` (plain `with` works too)."""
    return Recorder(path, secrets=secrets, metadata=metadata)


# -- replay --------------------------------------------------------------------


class Replayer(AbstractAsyncContextManager["Replayer"], AbstractContextManager["Replayer"]):
    """Serves a cassette's responses in order through respx."""

    def __init__(self, cassette: Cassette | str | Path, *, on_exhausted: str = "fail"):
        """`on_exhausted="pass"` sends requests past the recording to the network (to record new episodes)."""
        self.cassette = cassette if isinstance(cassette, Cassette) else load_cassette(cassette)
        self.on_exhausted = on_exhausted
        self.position = 0
        self.mismatch: CassetteMismatch | None = None
        hosts = sorted({urlsplit(i.request.url).netloc for i in self.cassette.interactions})
        self.router = respx.MockRouter(assert_all_called=False, assert_all_mocked=True)
        for host in hosts:
            self.router.route(host=host.split(":")[0]).mock(side_effect=self._serve)
        self.router.route().pass_through()

    @property
    def remaining(self) -> int:
        return len(self.cassette.interactions) - self.position

    def _fail(self, message: str) -> CassetteMismatch:
        error = CassetteMismatch(message)
        self.mismatch = self.mismatch or error
        return error

    def _serve(self, request: httpx.Request, route: respx.Route) -> httpx.Response:
        got_url = _clean_url(request.url, set())
        if self.position >= len(self.cassette.interactions) and self.on_exhausted == "pass":
            raise PassThrough("past the recording", request=request, origin=route)
        if self.position >= len(self.cassette.interactions):
            raise self._fail(f"cassette exhausted: no recorded interaction left for {request.method} {got_url}")
        expected = self.cassette.interactions[self.position]
        label = f"interaction #{self.position + 1} (request {self.position + 1} of {len(self.cassette.interactions)})"
        if request.method != expected.request.method or got_url != expected.request.url:
            raise self._fail(
                f"{label}: expected {expected.request.method} {expected.request.url}, got {request.method} {got_url}"
            )
        got_body = _parse_body(request.content)
        difference = _first_difference(_comparable(expected.request.body), _comparable(got_body))
        if difference:
            cause = likely_cause(difference, expected.request.body, got_body)
            raise self._fail(
                f"{label} ({request.method} {got_url}): request body differs at {difference}\nlikely cause: {cause}"
            )
        self.position += 1
        recorded = expected.response
        return httpx.Response(recorded.status, headers=recorded.headers, content=recorded.body.encode("utf-8"))

    def start(self) -> None:
        self.router.start()

    def stop(self) -> None:
        self.router.stop()

    def __enter__(self) -> Replayer:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.stop()
        if self.mismatch is not None and exc is not self.mismatch:
            raise self.mismatch from exc

    async def __aenter__(self) -> Replayer:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)


def replay(path: str | Path | Cassette) -> Replayer:
    """`with replay("x.json"):` (or `async with`). A differing request raises CassetteMismatch."""
    return Replayer(path)
