"""Requests LiteLLM built, remembered across processes: a CLI's first request need not wait for its import.

`import litellm` takes 3-4 s of CPU. `orchestrator run` starts it in a background
thread at once, but the first conversation line needs a model request, and on
the OpenAI wire that request is built by LiteLLM (parameters mapped, body,
headers and URL from its provider config). So each request LiteLLM builds on
that wire is remembered, in a small JSON file in the user's cache folder, as a
template: the body without `messages` (LiteLLM passed them through unchanged:
checked before a template is kept), the URL, and the headers with
the API key and the `extra_headers` values as placeholders. While LiteLLM is
still importing, a request whose arguments match a template is assembled from
it, byte for byte what LiteLLM built last time; once LiteLLM is in, every
request is built by LiteLLM again. Cost rates are remembered the same way, when
LiteLLM's price for the model is linear in the token counts.

A template is used only when it is fully determined by the arguments: the API
key and base URL given (not read from the environment), and no organization or
project from the environment. It is keyed by LiteLLM's version and by every
argument (the tools included) except the messages and the key, and used only for
messages of plain text and tool calls. A memo never holds a
secret: the key and header values are placeholders, and a template in which a
provider secret still appears is not kept. `ORCHESTRATOR_REQUEST_MEMO=0` turns
it off; `XDG_CACHE_HOME` moves it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Draft",
    "Recalled",
    "cost_from_memo",
    "draft",
    "forget",
    "recall",
    "remember",
    "remember_rates",
    "remember_unpriced",
]

_ACCOUNT_ENV = ("OPENAI_ORGANIZATION", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID")
_KEY_MARK = "\x00api_key\x00"
_MAX_ENTRIES = 256
_DRAFTS = 32  # requests per process that may be remembered
_drafts_left = _DRAFTS
_lock = threading.Lock()
_memo: dict[str, Any] | None = None  # the file's content, read once per process


@dataclass(frozen=True, slots=True)
class Draft:
    """What `remember` needs besides the built request: the key, and the arguments as they were."""

    key: str
    messages: list[Any]
    api_key: str
    extra_headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Recalled:
    url: str
    headers: dict[str, str]
    body: dict[str, Any]


def _enabled() -> bool:
    return os.environ.get("ORCHESTRATOR_REQUEST_MEMO", "1") not in ("0", "false", "no", "off")


def _path() -> Path:
    from importlib.metadata import PackageNotFoundError, version

    try:
        litellm_version = version("litellm")
    except PackageNotFoundError:
        litellm_version = "none"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "orchestrator-runtime" / f"litellm-{litellm_version}-requests.json"


def _key(kwargs: dict[str, Any]) -> str | None:
    """The memo key of one request's arguments, or None when they do not determine the request."""
    if not _enabled() or not kwargs.get("api_key") or not kwargs.get("api_base") or kwargs.get("organization"):
        return None
    if any(os.environ.get(name) for name in _ACCOUNT_ENV):
        return None
    shape = {k: v for k, v in kwargs.items() if k not in ("messages", "api_key", "extra_headers")}
    shape["extra_headers"] = sorted((kwargs.get("extra_headers") or {}).keys())
    try:
        text = json.dumps(shape, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def _load() -> dict[str, Any]:
    global _memo
    if _memo is None:
        try:
            data = json.loads(_path().read_text(encoding="utf-8"))
            _memo = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            _memo = {}
    return _memo


def draft(kwargs: dict[str, Any]) -> Draft | None:
    """Before LiteLLM builds a request: a Draft when its template is not known yet (None otherwise).

    Only a process's first requests are drafted: they are the ones a memo speeds up, and the key
    (a hash of the arguments, tools included: ~0.1 ms) is not worth computing on every later step."""
    global _drafts_left
    if _drafts_left <= 0:
        return None
    _drafts_left -= 1
    key = _key(kwargs)
    if key is None or key in _load().get("requests", {}):
        return None
    return Draft(
        key=key,
        messages=copy.deepcopy(kwargs["messages"]),  # LiteLLM's transforms may edit what they are given
        api_key=kwargs["api_key"],
        extra_headers=dict(kwargs.get("extra_headers") or {}),
    )


def remember(draft: Draft, url: str, headers: dict[str, str], body: dict[str, Any], secrets: Iterable[str]) -> None:
    """Keep what LiteLLM built for `draft`, if the messages passed through and no secret remains."""
    if body.get("messages") != draft.messages:
        return  # LiteLLM changed them: only LiteLLM can build this request
    order = list(body)
    fixed = {k: v for k, v in body.items() if k != "messages"}
    kept_headers: list[list[str]] = []
    for name, value in headers.items():
        if name in draft.extra_headers and value == draft.extra_headers[name]:
            kept_headers.append([name, "extra"])
        else:
            kept_headers.append([name, "fixed", value.replace(draft.api_key, _KEY_MARK)])
    entry = {"order": order, "fixed": fixed, "url": url, "headers": kept_headers}
    text = json.dumps(entry)
    hidden = [draft.api_key, *draft.extra_headers.values(), *secrets]
    if any(secret and len(secret) >= 4 and secret in text for secret in hidden):
        return
    _store("requests", draft.key, entry)


def recall(kwargs: dict[str, Any]) -> Recalled | None:
    """The request LiteLLM built last time for these arguments, with this request's messages; None when
    a message is not plain text and tool calls (LiteLLM may transform images, files, reasoning...)."""
    if not all(_plain(message) for message in kwargs.get("messages") or ()):
        return None
    key = _key(kwargs)
    entry = None if key is None else _load().get("requests", {}).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        headers = {}
        for name, kind, *value in entry["headers"]:
            extra = kind == "extra"
            headers[name] = kwargs["extra_headers"][name] if extra else value[0].replace(_KEY_MARK, kwargs["api_key"])
        parts = {**entry["fixed"], "messages": kwargs["messages"]}
        body = {name: parts[name] for name in entry["order"]}
        return Recalled(url=entry["url"], headers=headers, body=body)
    except (KeyError, TypeError, ValueError):
        return None  # a file from elsewhere: LiteLLM builds the request


_PLAIN_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})


def _plain(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.keys() <= _PLAIN_KEYS
        and (message.get("content") is None or isinstance(message["content"], str))
    )


def remember_rates(model: str, cost: Callable[[int, int], float]) -> None:
    """Keep `model`'s price per token when `cost(prompt_tokens, completion_tokens)` is linear in both."""
    if not _enabled() or model in _load().get("rates", {}):
        return
    try:
        per_input, per_output = cost(1_000_000, 0) / 1e6, cost(0, 1_000_000) / 1e6
        for prompt, completion in ((1, 0), (0, 1), (1234, 567), (250_000, 40_000)):
            expected = prompt * per_input + completion * per_output
            if abs(cost(prompt, completion) - expected) > 1e-12 + 1e-9 * expected:
                return  # tiered or otherwise non-linear: ask LiteLLM each time
    except Exception:
        return
    _store("rates", model, [per_input, per_output])


def remember_unpriced(model: str) -> None:
    """LiteLLM has no price for `model` (a scripted or local model): remembered so as not to ask it again."""
    if _enabled() and model not in _load().get("rates", {}):
        _store("rates", model, "unpriced")


def cost_from_memo(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The remembered cost of a request (0.0 for an unpriced model), None when nothing is remembered."""
    rates = _load().get("rates", {}).get(model)
    if rates == "unpriced":
        return 0.0
    if not (isinstance(rates, Sequence) and len(rates) == 2):
        return None
    return float(prompt_tokens * rates[0] + completion_tokens * rates[1])


def _store(section: str, key: str, value: Any) -> None:
    """Add one entry and write the file atomically (a cache: a lost race loses an entry, nothing else)."""
    with _lock:
        memo = _load()
        entries = memo.setdefault(section, {})
        entries[key] = value
        while len(entries) > _MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        path = _path()
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".requests-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(memo, file)
            os.replace(temp, path)


def forget() -> None:
    """Read the file again on next use, and draft again (tests point XDG_CACHE_HOME elsewhere)."""
    global _memo, _drafts_left
    _memo, _drafts_left = None, _DRAFTS
