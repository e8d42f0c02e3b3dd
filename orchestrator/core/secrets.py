"""Keeping secrets out of output: `Redactor` (a fixed set of values -> `***`) and `SecretScopes` (whose secrets where).

A thread's secrets are redacted in that thread's output only; config keys and process secrets
everywhere. docs/security.md says what a short secret means.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ahocorasick_rs import AhoCorasick, MatchKind

REDACTED = "***"
MIN_SECRET_LEN = 4  # a shorter secret cannot be redacted without rewriting ordinary text: set_env refuses it
WHOLE_WORD_BELOW = 8  # a secret shorter than this is redacted only where it stands as a whole word
_SURROGATES = re.compile("([\ud800-\udfff]+)")  # what no UTF-8 text, and so no secret, holds


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


class Redactor:
    """Replaces a fixed set of secret values with `***` in strings and JSON-like data.

    Compiled once (Aho-Corasick automata), so a text costs one pass whatever the
    number of secrets. Secrets of `WHOLE_WORD_BELOW` characters or more are
    replaced wherever they occur (longest first, so no part of a longer secret
    survives); shorter ones only as a whole word, because a short value such as
    `order` also occurs inside ordinary words (`border`, `order_id`) that are
    not the secret. Values under `MIN_SECRET_LEN` are not matched at all.

    Each secret is also matched in every escaped form a dump gives it (JSON,
    with and without `ensure_ascii`; Python's `repr` and `ascii`), because a
    text is often a structure someone serialised before it reached us: a tool's
    JSON result, a traceback quoting a repr. A secret holding `"`, `\\`, a
    newline or a non-ASCII character is not written as itself there.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LEN}
        long = sorted({f for s in values if len(s) >= WHOLE_WORD_BELOW for f in escaped_forms(s)})
        short = sorted({f for s in values if len(s) < WHOLE_WORD_BELOW for f in escaped_forms(s)} - set(long))
        self._long = AhoCorasick(long, matchkind=MatchKind.LeftmostLongest) if long else None
        self._short = AhoCorasick(short) if short else None
        self._size = len(values)

    @property
    def active(self) -> bool:
        return self._size > 0

    def __len__(self) -> int:
        return self._size

    def text(self, value: str) -> str:
        try:
            return self._text(value)
        except UnicodeEncodeError:  # a lone surrogate (a tool's own string): the automata take UTF-8 only
            parts = _SURROGATES.split(value)  # text, surrogates, text, ...: no secret spans a surrogate
            return "".join(part if i % 2 else self._text(part) for i, part in enumerate(parts))

    def _text(self, value: str) -> str:
        if self._long is not None:
            value = _replace(value, self._long.find_matches_as_indexes(value))
        if self._short is not None:
            value = _replace(value, _whole_words(value, self._short.find_matches_as_indexes(value, overlapping=True)))
        return value

    def data(self, value: Any) -> Any:
        if not self._size:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value

    def json(self, value: Any) -> str:
        """`value` as JSON: its strings redacted before the dump, and the dump again (what `default=str` made)."""
        return self.text(json.dumps(self.data(value), default=str))


def escaped_forms(secret: str) -> set[str]:
    """`secret` as it reads inside a JSON string or a Python repr of a longer string.

    A repr quotes with `'` (escaping any `'` inside) unless the string holds `'` and no `"`;
    both quotings are covered, each of the secret followed by marker quotes that force it."""
    forms = {secret}
    for ascii_only in (True, False):
        forms.add(json.dumps(secret, ensure_ascii=ascii_only)[1:-1])
    for show in (repr, ascii):
        forms.add(show(secret + "'\"")[1:-4])  # quoted with ': the marker reads \'" before the closing quote
        if '"' not in secret:
            forms.add(show(secret + "'")[1:-2])  # quoted with ": the marker reads ' before it
    return forms


def _replace(text: str, matches: Iterable[tuple[int, int, int]]) -> str:
    parts: list[str] = []
    last = 0
    for _, start, end in matches:
        parts.append(text[last:start])
        parts.append(REDACTED)
        last = end
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def _whole_words(text: str, matches: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Of overlapping matches, those standing as whole words; leftmost, then longest, never overlapping."""
    kept: list[tuple[int, int, int]] = []
    last = 0
    for match in sorted(matches, key=lambda m: (m[1], m[1] - m[2])):
        _, start, end = match
        if start < last:
            continue
        if (start > 0 and _is_word_char(text[start - 1])) or (end < len(text) and _is_word_char(text[end])):
            continue
        kept.append(match)
        last = end
    return kept


_NOTHING = Redactor()


class SecretScopes:
    """Which secrets are redacted where.

    Global secrets (config API keys, server tokens, values read from the process
    environment) are redacted in everything. A thread's secrets (its own and
    its user's secret env values, agent and prompt defaults it read) only in
    that thread's output, and in the threads it runs inside (a sub-agent's
    result becomes its parent's tool result): one user's secret never rewrites
    another user's data. Each scope keeps one compiled `Redactor`, rebuilt only
    when a new secret joins it; a thread's scope is forgotten with its event
    channel (`EventBus.detach`) and refilled as its next execution reads env.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._global: set[str] = set()
        self._threads: dict[str, set[str]] = {}
        self._parents: dict[str, str] = {}
        self._compiled: dict[str | None, Redactor] = {}  # thread id (None: global only) -> matcher
        self._everywhere: Redactor | None = None
        for value in secrets:
            self.add(value)

    def add(self, value: str | None, thread_id: str | None = None) -> None:
        """Redact `value` in `thread_id`'s output (and its parents'), or everywhere with no thread."""
        if not value or len(value) < MIN_SECRET_LEN or value in self._global:
            return
        if thread_id is None:
            self._global.add(value)
            self._compiled.clear()
            self._everywhere = None
            return
        seen: set[str] = set()
        while thread_id is not None and thread_id not in seen:
            seen.add(thread_id)
            scope = self._threads.setdefault(thread_id, set())
            if value not in scope:
                scope.add(value)
                self._compiled.pop(thread_id, None)
                self._everywhere = None
            thread_id = self._parents.get(thread_id)

    def nest(self, child_id: str, parent_id: str | None) -> None:
        """`child_id` runs inside `parent_id`: its secrets are redacted in the parent too."""
        if parent_id is not None and parent_id != child_id:
            self._parents[child_id] = parent_id

    def forget(self, thread_id: str) -> None:
        self._parents.pop(thread_id, None)
        if self._threads.pop(thread_id, None) is not None:
            self._compiled.pop(thread_id, None)
            self._everywhere = None

    def for_thread(self, thread_id: str | None) -> Redactor:
        """The matcher for output belonging to `thread_id`: global secrets and the thread's own."""
        own = self._threads.get(thread_id) if thread_id is not None else None
        key = thread_id if own else None  # a thread without secrets of its own shares the global matcher
        compiled = self._compiled.get(key)
        if compiled is None:
            values = self._global | own if own else self._global
            compiled = Redactor(values) if values else _NOTHING
            self._compiled[key] = compiled
        return compiled

    def everywhere(self) -> Redactor:
        """Every known secret, for output that belongs to no one thread: the operator's logs."""
        if self._everywhere is None:
            self._everywhere = Redactor(self._global.union(*self._threads.values()))
        return self._everywhere
