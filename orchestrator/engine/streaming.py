"""Turning a model stream's deltas into a message, and spotting progress arguments.

The executor feeds every `TextDelta`, `ReasoningDelta`, `RefusalDelta`,
`ToolCallDelta` and `ProviderBlock` to a `StreamAssembler`. It assembles the
text, the reasoning blocks, the refusal and the tool calls (per `index`, which
the provider client has already made one per call: see `providers/streams/call_ids.py`;
parallel and interleaved calls included) and says when each call's
`tool_call_started` should fire: the moment the tool's `progress_argument` (a
top-level string property of the arguments object) has closed in the stream,
so a UI can show "Searching for 'x'..." while the rest of the call is still
streaming.

Why a hand-written scanner instead of a partial-JSON parser: re-parsing the
growing buffer on every delta costs O(n^2) over a call (a 1 MB argument in
10-byte deltas is 100k re-parses). `ProgressScanner` is a small state machine
that looks at each character at most once, and jumps over long runs of plain
string characters with regex searches, so detection is linear and cheap.

When a call ends. LiteLLM renumbers Anthropic's content blocks from 0 and does
not surface `content_block_stop`, so a call's end is inferred: its arguments'
top-level object closing, or the stream ending (`finish()`). A new index
starting is deliberately NOT taken as the end of earlier calls, because
providers may interleave fragments of parallel calls; treating it as an end
would fire those calls with a wrong `None`. The cost is only that a call whose
JSON never closes (empty or truncated arguments) fires at `finish()`.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.messages import ToolCall
from providers.stream import ProviderBlock, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta
from providers.text import clean

__all__ = ["CallStarted", "ProgressScanner", "StreamAssembler"]

_WS = re.compile(r"[ \t\n\r]*")
_STRING_STOP = re.compile(r'["\\]')  # what can end or escape inside a JSON string
_NESTED_STOP = re.compile(r'[{}\[\]"]')  # what changes depth inside a skipped container
_SCALAR_END = re.compile(r"[,} \t\n\r]")  # numbers, true, false, null hold none of these

# Scanner states: where in the top-level object the next character falls.
_START, _KEY_OR_END, _KEY, _COLON, _VALUE, _CAPTURE, _SKIP_STRING, _NESTED, _SCALAR, _AFTER_VALUE = range(10)


def _decode_string(raw: str) -> str | None:
    """Decode a JSON string body (escapes intact). `strict=False` lets raw control
    characters through, which models do emit; a broken escape gives None."""
    try:
        text: str = json.loads(f'"{raw}"', strict=False)  # a JSON string literal decodes to a str
    except ValueError:
        return None
    return clean(text) if "\\u" in raw else text  # an escaped lone surrogate: U+FFFD, so events can be stored


def _skip_ws(s: str, pos: int) -> int:
    """Where the whitespace from `pos` ends (`_WS` matches the empty string, so it always matches)."""
    m = _WS.match(s, pos)
    return m.end() if m is not None else pos


class ProgressScanner:
    """Incrementally finds the string value of one top-level key of a JSON object.

    `feed()` returns the decoded value exactly once, from the feed whose fragment
    holds the value's closing quote; otherwise None. `done` turns True once no
    further input can matter: the value was found, the top-level object closed,
    or the text is not a JSON object. A same-named key inside a nested value never
    matches; a non-string value for the key yields no value (a later duplicate
    key holding a string still would, as `json.loads` keeps the last one).
    """

    __slots__ = (
        "_blocks",
        "_depth",
        "_escape",
        "_escaped",
        "_in_string",
        "_matched",
        "_parts",
        "_state",
        "done",
        "key",
        "value",
    )

    def __init__(self, key: str) -> None:
        self.key = key
        self.done = False
        self.value: str | None = None
        self._state = _START
        self._escape = False  # the previous fragment ended right after a backslash
        self._parts: list[str] = []  # raw text of the key or value being read
        self._blocks: list[
            str
        ] = []  # earlier parts, joined a few hundred at a time (a 1 MB value comes in 100k deltas)
        self._escaped = False  # the string being read has a backslash: it needs decoding
        self._depth = 0  # depth inside a skipped object/array value
        self._in_string = False  # inside a string within a skipped container
        self._matched = False  # the current key equals self.key

    def feed(self, fragment: str) -> str | None:
        if self.done or not fragment:
            return None
        state = self._state
        if state in (_CAPTURE, _SKIP_STRING) and not self._escape and '"' not in fragment and "\\" not in fragment:
            if state == _CAPTURE:  # the hot path: a plain run inside a string
                self._keep(fragment)
            return None
        pos, end = 0, len(fragment)
        while pos < end and not self.done:
            pos = _STEPS[self._state](self, fragment, pos)
        return self.value if self.done else None

    # -- string bodies -------------------------------------------------------

    def _string_end(self, s: str, pos: int) -> int:
        """Index of the closing quote of the string being read, or -1 if `s` ends first."""
        if self._escape:
            self._escape = False
            pos += 1  # the escaped character; \\uXXXX digits hold no quote or backslash
        search = _STRING_STOP.search
        while True:
            m = search(s, pos)
            if m is None:
                return -1
            i = m.start()
            if s[i] == '"':
                return i
            self._escaped = True
            if i + 1 >= len(s):
                self._escape = True
                return -1
            pos = i + 2

    def _read_key(self, s: str, pos: int) -> int:
        q = self._string_end(s, pos)
        if q < 0:
            self._keep(s[pos:])
            return len(s)
        self._keep(s[pos:q])
        escaped, raw = self._escaped, self._take()
        self._matched = (_decode_string(raw) if escaped else raw) == self.key
        self._state = _COLON
        return q + 1

    def _capture(self, s: str, pos: int) -> int:
        q = self._string_end(s, pos)
        if q < 0:
            self._keep(s[pos:])
            return len(s)
        self._keep(s[pos:q])
        escaped, raw = self._escaped, self._take()
        self.value = _decode_string(raw) if escaped else raw  # no backslash: the raw text is the value
        self.done = True
        return q + 1

    def _keep(self, piece: str) -> None:
        parts = self._parts
        parts.append(piece)
        if len(parts) >= 512:  # so the closing delta joins a few blocks, not 100k pieces
            self._blocks.append("".join(parts))
            parts.clear()

    def _take(self) -> str:
        """The string read so far, and a fresh start for the next one."""
        raw = "".join([*self._blocks, *self._parts])
        self._blocks, self._parts, self._escaped = [], [], False
        return raw

    def _skip_string(self, s: str, pos: int) -> int:
        q = self._string_end(s, pos)
        if q < 0:
            return len(s)
        self._state = _AFTER_VALUE
        return q + 1

    # -- structure -----------------------------------------------------------

    def _give_up(self, s: str) -> int:
        """The object closed, or the text is not a JSON object: no value will come."""
        self.done = True
        return len(s)

    def _expect(self, s: str, pos: int, char: str, state: int) -> int:
        """After optional whitespace, `char` moves on to `state`; anything else ends the scan."""
        p = _skip_ws(s, pos)
        if p == len(s):
            return p
        if s[p] != char:
            return self._give_up(s)
        self._state = state
        return p + 1

    def _before_object(self, s: str, pos: int) -> int:
        return self._expect(s, pos, "{", _KEY_OR_END)

    def _key_or_end(self, s: str, pos: int) -> int:
        # "}" closes the object without the value; anything but a key is not JSON
        return self._expect(s, pos, '"', _KEY)

    def _colon(self, s: str, pos: int) -> int:
        return self._expect(s, pos, ":", _VALUE)

    def _value(self, s: str, pos: int) -> int:
        p = _skip_ws(s, pos)
        if p == len(s):
            return p
        c = s[p]
        if c == '"':
            self._state = _CAPTURE if self._matched else _SKIP_STRING
            return p + 1
        if c == "{" or c == "[":
            self._state, self._depth, self._in_string = _NESTED, 1, False
            return p + 1
        self._state = _SCALAR
        return p

    def _scalar(self, s: str, pos: int) -> int:
        m = _SCALAR_END.search(s, pos)
        if m is None:
            return len(s)
        self._state = _AFTER_VALUE
        return m.start()

    def _nested(self, s: str, pos: int) -> int:
        while True:
            if self._in_string:
                q = self._string_end(s, pos)
                if q < 0:
                    return len(s)
                self._in_string, pos = False, q + 1
            m = _NESTED_STOP.search(s, pos)
            if m is None:
                return len(s)
            i, c = m.start(), m.group()
            pos = i + 1
            if c == '"':
                self._in_string = True
            elif c == "{" or c == "[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    self._state = _AFTER_VALUE
                    return pos

    def _after_value(self, s: str, pos: int) -> int:
        p = _skip_ws(s, pos)
        if p == len(s):
            return p
        if s[p] != ",":
            return self._give_up(s)  # "}" closes the object; anything else is not JSON
        self._state = _KEY_OR_END
        return p + 1


_STEPS: tuple[Callable[[ProgressScanner, str, int], int], ...] = (
    ProgressScanner._before_object,
    ProgressScanner._key_or_end,
    ProgressScanner._read_key,
    ProgressScanner._colon,
    ProgressScanner._value,
    ProgressScanner._capture,
    ProgressScanner._skip_string,
    ProgressScanner._nested,
    ProgressScanner._scalar,
    ProgressScanner._after_value,
)


@dataclass(slots=True)
class CallStarted:
    """`tool_call_started` is due for this call now."""

    index: int
    id: str
    name: str
    progress_value: str | None


class _Pieces:
    """Text that arrives in many small deltas, kept in blocks of a few hundred joined pieces.

    Why not a list of every delta: a 2-byte delta is a 51-byte `str`, so an answer of small deltas
    held some 30 times its size until it was joined. Why not `+=`: on a string held in a dict or an
    attribute each `+=` copies the whole text, quadratic over an answer (a megabyte of reasoning in
    8-byte deltas took seconds of the event loop). Reading joins once and keeps the result.
    """

    __slots__ = ("_blocks", "_parts")

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._parts: list[str] = []

    def add(self, piece: str) -> None:
        parts = self._parts
        parts.append(piece)
        if len(parts) >= 512:
            self._blocks.append("".join(parts))
            parts.clear()

    def text(self) -> str:
        if not self._parts and len(self._blocks) <= 1:
            return self._blocks[0] if self._blocks else ""
        joined = "".join([*self._blocks, *self._parts])
        self._blocks, self._parts = [joined], []
        return joined

    def __bool__(self) -> bool:
        return bool(self._parts or self._blocks)


@dataclass(slots=True)
class _Call:
    index: int
    id: str | None = None
    name: str | None = None
    parts: _Pieces = field(default_factory=_Pieces)  # argument fragments, joined when read
    scanner: ProgressScanner | None = None
    started: bool = False
    signature: str | None = None


class StreamAssembler:
    """Assembles one model response from its deltas and says when calls start.

    `progress_argument_for(name)` gives a tool's progress-argument name, or None
    for tools without one and for unknown names. `id` and `name` are taken from
    the first fragment that carries them; a name arriving after some arguments
    is fine (the arguments seen so far are scanned then).
    """

    def __init__(self, progress_argument_for: Callable[[str], str | None]) -> None:
        self._progress_argument_for = progress_argument_for
        self._text = _Pieces()
        self._calls: dict[int, _Call] = {}
        self.provider_blocks: list[dict[str, Any]] = []
        self._reasoning: list[dict[str, Any]] = []  # {"type": "thinking", "thinking", "signature"} / redacted
        self._thinking: _Pieces | None = None  # the open thinking block's text
        self._refusal = _Pieces()

    @property
    def text(self) -> str:
        return self._text.text()

    @property
    def refusal(self) -> str | None:
        return self._refusal.text() or None

    @property
    def reasoning(self) -> list[dict[str, Any]]:
        """The thinking blocks so far, the open one's text included."""
        if self._thinking is not None:
            self._reasoning[-1]["thinking"] = self._thinking.text()
        return self._reasoning

    def reset(self) -> None:
        """Forget everything: a retry or fallback restarted the stream."""
        self._text = _Pieces()
        self._calls = {}
        self.provider_blocks = []
        self._reasoning = []
        self._thinking = None
        self._refusal = _Pieces()

    def feed(
        self, item: TextDelta | ReasoningDelta | RefusalDelta | ToolCallDelta | ProviderBlock
    ) -> list[CallStarted]:
        if isinstance(item, ToolCallDelta):
            return self._feed_call(item)
        if isinstance(item, TextDelta):
            if item.text:
                self._text.add(item.text)
            return []
        if isinstance(item, ReasoningDelta):
            self._feed_reasoning(item)
            return []
        if isinstance(item, RefusalDelta):
            self._refusal.add(item.text)
            return []
        if isinstance(item, ProviderBlock):
            self.provider_blocks.append(item.block)
            return []
        raise TypeError(
            "StreamAssembler.feed: expected TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta or ProviderBlock,"
            f" got {type(item).__name__} (on StreamRestart call reset(), on StreamEnd call finish())"
        )

    def _feed_reasoning(self, item: ReasoningDelta) -> None:
        """Text joins the open thinking block; a signature closes it (Anthropic sends it last);
        redacted thinking is a block of its own."""
        if item.redacted is not None:
            self._close_thinking()
            self._reasoning.append({"type": "redacted_thinking", "data": item.redacted})
            return
        if self._thinking is None:
            self._reasoning.append({"type": "thinking", "thinking": ""})
            self._thinking = _Pieces()
        if item.text:
            self._thinking.add(item.text)
        if item.signature:
            self._reasoning[-1]["signature"] = item.signature
            self._close_thinking()

    def _close_thinking(self) -> None:
        if self._thinking is not None:
            self._reasoning[-1]["thinking"] = self._thinking.text()
            self._thinking = None

    def finish(self) -> list[CallStarted]:
        """The stream ended: every call not started yet starts now, without a value."""
        return [self._start(c, None) for _, c in sorted(self._calls.items()) if not c.started]

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(
                id=self._id(c),
                name=c.name or "",
                arguments=args if (args := c.parts.text()).strip() else "{}",
                signature=c.signature,
            )
            for _, c in sorted(self._calls.items())
        ]

    def _feed_call(self, delta: ToolCallDelta) -> list[CallStarted]:
        call = self._calls.get(delta.index)
        if call is None:
            call = self._calls[delta.index] = _Call(delta.index)
        if delta.id and call.id is None:
            call.id = delta.id
        if delta.signature:
            call.signature = delta.signature
        if delta.arguments:
            call.parts.add(delta.arguments)
        if call.started:
            return []
        if delta.name and call.name is None:
            call.name = delta.name
            key = self._progress_argument_for(delta.name)
            if key is None:
                return [self._start(call, None)]
            call.scanner = ProgressScanner(key)
            return self._scan(call, call.parts.text()) if call.parts else []
        if call.scanner is not None and delta.arguments:
            return self._scan(call, delta.arguments)
        return []

    def _scan(self, call: _Call, fragment: str) -> list[CallStarted]:
        scanner = call.scanner
        assert scanner is not None
        value = scanner.feed(fragment)
        if scanner.done:
            return [self._start(call, value)]
        return []

    def _start(self, call: _Call, value: str | None) -> CallStarted:
        call.started = True
        call.scanner = None
        return CallStarted(call.index, self._id(call), call.name or "", value)

    def _id(self, call: _Call) -> str:
        """The provider's id, or a synthesised one fixed at first use so events and history agree."""
        if call.id is None:
            call.id = f"call_{call.index}_{secrets.token_hex(6)}"
        return call.id
