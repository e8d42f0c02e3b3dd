"""The partial object of a typed answer as it streams, in time linear in the answer (`output_delta` events).

Re-parsing the text so far on every delta (what a partial-JSON parser called per chunk does) costs the
square of the answer's size: a 1 MB answer in 10-byte deltas is 100,000 parses of up to 1 MB. Instead,
`PartialJson` reads each character once, as `streaming.ProgressScanner` does: explicit state, a dispatch
table of steps, string bodies skipped with one regular-expression search per fragment. After each fragment
it knows the longest prefix of the answer that can be completed (`upto`) and what completes it (`close`:
a closing quote and the open containers' closers, at most `limit` of them), so that

    json.loads(text[:upto] + close)

is the partial object: every finished value, the string being written so far, open lists and objects
closed (`upto` 0: no value has begun yet). A key without its value yet, a half-written number or
literal, or the middle of an escape is left out until it is whole. Text that is not JSON (a prompted
model's preamble) ends the scan (`done`); the answer is still validated whole when it ends
(`typed_output.read_answer`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["PartialJson"]

_STOP = re.compile(r'["\\]')
_NUMBER_RUN = re.compile(r"[-+0-9.eE]+")
_SPACE = " \t\r\n"
_LITERALS = {"t": "true", "f": "false", "n": "null"}

# The states: what the next significant character may be.
_VALUE = 0  # a value (the root, after ':' or after ',' in a list)
_LIST_START = 1  # a value or ']' (right after '[')
_OBJECT_START = 2  # a key or '}' (right after '{')
_KEY_NEXT = 3  # a key (after ',' in an object)
_KEY = 4  # inside a key's string
_COLON = 5  # ':' after a key
_STRING = 6  # inside a value's string
_NUMBER = 7  # inside a number
_LITERAL = 8  # inside true / false / null
_AFTER = 9  # ',' or a closer, after a value
_END = 10  # after the root value: only whitespace


class PartialJson:
    """Feed an answer's text fragment by fragment; `upto` and `close` say how to complete it (see module doc)."""

    __slots__ = ("_base", "_closers", "_escape", "_literal", "_state", "done", "close", "limit", "upto", "work")

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit  # open containers at most (model_json.MAX_DEPTH): deeper text ends the scan
        self.upto = 0  # characters of the answer, from its start, that `close` completes
        self.close = ""  # what completes text[:upto]; "" once the root value is whole
        self.done = False  # nothing further can change `upto` (the root value ended, or the text is not JSON)
        self.work = 0  # steps taken and closer characters built: the linearity tests count this, not time
        self._base = 0  # characters fed before the current fragment
        self._state = _VALUE
        self._closers = ""  # the open containers' closers, innermost first
        self._escape = 0  # inside a string: 1 after a backslash, 2-5 while reading \uXXXX digits
        self._literal = ""  # the rest of the literal being read

    def feed(self, fragment: str) -> bool:
        """Read `fragment`; True when `upto` moved (the partial object changed)."""
        before = self.upto
        pos, end = 0, len(fragment)
        while pos < end and not self.done:
            self.work += 1
            pos = _STEPS[self._state](self, fragment, pos)
        self._base += end
        return self.upto != before

    # -- marking what can be completed ---------------------------------------

    def _safe(self, at: int, in_string: bool = False) -> None:
        """The answer up to `at` (an index in the current fragment) can be completed now."""
        self.upto = self._base + at
        self.close = '"' + self._closers if in_string else self._closers
        self.work += len(self.close)

    def _open(self, s: str, pos: int, closer: str, state: int) -> int:
        if len(self._closers) >= self.limit:
            self.done = True
            return pos
        self._closers = closer + self._closers
        self.work += len(self._closers)
        self._state = state
        self._safe(pos + 1)
        return pos + 1

    def _closed(self, s: str, pos: int) -> int:
        self._closers = self._closers[1:]
        self.work += len(self._closers)
        self._state = _AFTER if self._closers else _END
        self._safe(pos + 1)
        if not self._closers:
            self.done = True
        return pos + 1

    def _stop(self, s: str, pos: int) -> int:
        self.done = True  # not JSON: `upto` stays where the text was last whole
        return pos

    # -- the steps: each reads from `pos` and returns where it stopped -------------

    def _value(self, s: str, pos: int) -> int:
        c = s[pos]
        if c in _SPACE:
            return pos + 1
        if c == "{":
            return self._open(s, pos, "}", _OBJECT_START)
        if c == "[":
            return self._open(s, pos, "]", _LIST_START)
        if c == '"':
            self._state = _STRING
            self._safe(pos + 1, in_string=True)
            return pos + 1
        if c == "-" or c.isdigit():
            self._state = _NUMBER
            return pos
        if c in _LITERALS:
            self._state, self._literal = _LITERAL, _LITERALS[c]
            return pos
        return self._stop(s, pos)

    def _list_start(self, s: str, pos: int) -> int:
        if s[pos] == "]":
            return self._closed(s, pos)
        return self._value(s, pos)

    def _object_start(self, s: str, pos: int) -> int:
        c = s[pos]
        if c == "}":
            return self._closed(s, pos)
        return self._key_next(s, pos)

    def _key_next(self, s: str, pos: int) -> int:
        c = s[pos]
        if c in _SPACE:
            return pos + 1
        if c == '"':
            self._state = _KEY
            return pos + 1
        return self._stop(s, pos)

    def _string_body(self, s: str, pos: int) -> tuple[int, bool]:
        """Skip a string's body from `pos`: (where it stopped, whether at its closing quote)."""
        end = len(s)
        while pos < end:
            if self._escape == 1:
                self._escape = 2 if s[pos] == "u" else 0
                pos += 1
                continue
            if self._escape >= 2:  # the \\u escape's four hex digits
                self._escape = 0 if self._escape == 5 else self._escape + 1
                pos += 1
                continue
            m = _STOP.search(s, pos)
            if m is None:
                return end, False
            if s[m.start()] == '"':
                return m.start(), True
            self._escape, pos = 1, m.start() + 1
        return pos, False

    def _key(self, s: str, pos: int) -> int:
        pos, closed = self._string_body(s, pos)
        if closed:
            self._state = _COLON
            return pos + 1
        return pos

    def _colon(self, s: str, pos: int) -> int:
        c = s[pos]
        if c in _SPACE:
            return pos + 1
        if c == ":":
            self._state = _VALUE
            return pos + 1
        return self._stop(s, pos)

    def _string(self, s: str, pos: int) -> int:
        start_escape = self._escape
        stop, closed = self._string_body(s, pos)
        if closed:
            self._state = _AFTER if self._closers else _END
            self._safe(stop + 1)
            if not self._closers:
                self.done = True
            return stop + 1
        if self._escape == 0 and (stop > pos or start_escape):
            self._safe(stop, in_string=True)  # the fragment ended between characters
        return stop

    def _number(self, s: str, pos: int) -> int:
        m = _NUMBER_RUN.match(s, pos)
        stop = m.end() if m is not None else pos
        if stop > pos and s[stop - 1].isdigit():
            self._safe(stop)  # a number may go on in the next fragment; what it is so far is one
        if stop < len(s):
            self._state = _AFTER if self._closers else _END
        return stop

    def _literal_step(self, s: str, pos: int) -> int:
        want = self._literal
        got = s[pos : pos + len(want)]
        if not want.startswith(got):
            return self._stop(s, pos)
        self._literal = want[len(got) :]
        if not self._literal:
            self._state = _AFTER if self._closers else _END
            self._safe(pos + len(got))
        return pos + len(got)

    def _after(self, s: str, pos: int) -> int:
        c = s[pos]
        if c in _SPACE:
            return pos + 1
        if c == ",":
            self._state = _KEY_NEXT if self._closers[0] == "}" else _VALUE
            return pos + 1
        if c == self._closers[0]:
            return self._closed(s, pos)
        return self._stop(s, pos)

    def _end(self, s: str, pos: int) -> int:
        if s[pos] in _SPACE:
            return pos + 1
        return self._stop(s, pos)


_STEPS: dict[int, Callable[[PartialJson, str, int], int]] = {
    _VALUE: PartialJson._value,
    _LIST_START: PartialJson._list_start,
    _OBJECT_START: PartialJson._object_start,
    _KEY_NEXT: PartialJson._key_next,
    _KEY: PartialJson._key,
    _COLON: PartialJson._colon,
    _STRING: PartialJson._string,
    _NUMBER: PartialJson._number,
    _LITERAL: PartialJson._literal_step,
    _AFTER: PartialJson._after,
    _END: PartialJson._end,
}
