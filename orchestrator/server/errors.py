"""Every error answer is `{"error": {"code", "message", "field"}}`.

Handlers here turn FastAPI's validation errors, HTTP exceptions and the
runtime's own exceptions into that shape, so no client ever has to parse
FastAPI's default `detail` lists, and nothing unexpected becomes a bare 500
with a stack trace (or a secret) in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from orchestrator.server.schemas import ErrorBody

_log = structlog.get_logger("orchestrator.server")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
}


class ApiError(Exception):
    """Raise from a route: becomes the JSON error answer with this status and code."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = f"{field}: {message}" if field and not message.startswith(field) else message
        self.field = field


def error_response(
    status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message, "field": field}}, status_code=status, headers=headers
    )


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries, so the document lists every status a route answers
    (400, 413 and 422 can answer any request: bad JSON, too big, bad parameters)."""
    every = sorted({400, 413, 422, *statuses})
    return {s: {"model": ErrorBody, "description": _HTTP_CODES.get(s, "error").replace("_", " ")} for s in every}


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return error_response(exc.status, exc.code, exc.message, exc.field, headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first: Mapping[str, Any] = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return error_response(
            400,
            "invalid_json",
            f"request body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}",
            "body",
        )
    problems = "; ".join(
        f"{_field(e['loc']) or 'request'}: {e['msg'].removeprefix('Value error, ')}" for e in errors[:5]
    )
    return error_response(422, "invalid_request", problems, _field(first["loc"]) or None)


def _field(loc: Any) -> str:
    return ".".join(str(part) for part in loc)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    if exc.status_code == 400 and message == "There was an error parsing the body":
        return error_response(400, "invalid_json", "body: cannot be parsed as JSON (UTF-8 expected)", "body")
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route for {request.method} {request.url.path}"
    return error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # The message stays generic: an exception's text may carry values we must not echo.
    _log.error("server_error", method=request.method, path=request.url.path, error_type=type(exc).__name__)
    return error_response(500, "internal_error", "internal server error; see the server log")
