"""How a provider call failed: the kind, the status, and whether another attempt may help.

LiteLLM maps every provider's errors to its exception classes; `classify_error` sorts those
(and transport errors) for the client's retries and fallbacks. `retry_after` reads the
provider's own hint, `scrub` keeps keys out of the messages callers see.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["AnswerTooLarge", "Failure", "StreamCut", "classify_error", "retry_after", "scrub"]

_KEY_PATTERN = re.compile(
    r"\b(sk-[A-Za-z0-9_\-]{8,}|sk-ant-[A-Za-z0-9_\-]{8,}|AIza[A-Za-z0-9_\-]{20,}|xai-[A-Za-z0-9]{8,}|gsk_[A-Za-z0-9]{8,})"
)


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str
    status: int | None
    retryable: bool


_BY_CLASS = {
    "AuthenticationError": ("auth", 401, False),
    "PermissionDeniedError": ("auth", 403, False),
    "ContextWindowExceededError": ("context_window", 400, False),
    "ContentPolicyViolationError": ("content_policy", 400, False),
    "NotFoundError": ("not_found", 404, False),
    "BadRequestError": ("bad_request", 400, False),
    "UnprocessableEntityError": ("bad_request", 422, False),
    "RateLimitError": ("rate_limit", 429, True),
    "Timeout": ("timeout", 408, True),
    "MidStreamFallbackError": ("stream_cut", None, True),
    "APIConnectionError": ("connection", None, True),
    "ServiceUnavailableError": ("server", 503, True),
    "BadGatewayError": ("server", 502, True),
    "InternalServerError": ("server", 500, True),
    "ConfigError": ("config", None, False),
    "TimeoutError": ("timeout", None, True),
    "StreamCut": ("stream_cut", None, True),
    "StreamContradiction": ("stream_invalid", None, True),
    "AnswerTooLarge": ("too_large", None, False),
}


class StreamCut(Exception):
    """The stream ended without the provider's own end marker: never an answer (retried)."""


class AnswerTooLarge(Exception):
    """The answer passed its model's `max_answer_bytes` (see `answer_size`): cut, not retried, fallbacks tried."""


def classify_error(exc: BaseException) -> Failure:
    """Sort an exception into transient (retry) or final (fallback / give up)."""
    status = getattr(exc, "provider_status_code", None) or getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    for cls in type(exc).__mro__:
        if cls.__name__ in _BY_CLASS:
            kind, default_status, retryable = _BY_CLASS[cls.__name__]
            return Failure(kind, status or default_status, retryable)
    if status is not None:
        return Failure("http", status, status in (408, 409, 429) or status >= 500)
    name = type(exc).__name__
    transient = any(word in name for word in ("Timeout", "Connect", "Protocol", "ReadError", "Network"))
    return Failure("connection" if transient else "error", None, transient)


def retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header (delta or HTTP date), if the provider sent one."""
    headers = getattr(exc, "litellm_response_headers", None) or getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    if value is None:
        ms = headers.get("retry-after-ms")
        return float(ms) / 1000 if ms else None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(set(secrets), key=len, reverse=True):
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return _KEY_PATTERN.sub("***", text)
