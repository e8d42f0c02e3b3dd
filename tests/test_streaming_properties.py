"""Property tests: however a stream is split and interleaved, assembly and starts are right.

Each example builds 1-3 tool calls whose arguments are random JSON objects (unicode
strings with quotes, backslashes and emoji; random whitespace; strings written
with or without \\u escapes), with the tool's progress key absent, a string, or a
non-string, at a random position, and often the same key nested deeper. Every
call's text is cut at random points and the calls' fragments are interleaved
(each call's own order kept), with text deltas mixed in.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.messages import ToolCall
from orchestrator.engine.streaming import StreamAssembler
from providers.stream import TextDelta, ToolCallDelta

PROGRESS = {"search": "query", "write": "path", "plain": None}
_NASTY = ['"', "\\", "\\u", "😀", "\n", "{", "}", "[", ",", ":", '"query": "x"', "\x00", "é"]

strings = st.lists(st.one_of(st.characters(codec="utf-8"), st.sampled_from(_NASTY)), max_size=12).map("".join)
keys = st.one_of(strings, st.sampled_from(["query", "path"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), strings)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=8
)
non_string_values = json_values.filter(lambda v: not isinstance(v, str))


class _Writer:
    """Serialises JSON with random whitespace and escaping, noting where a value ends."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.parts: list[str] = []
        self.size = 0

    def put(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def ws(self) -> None:
        self.put(self.rnd.choice(["", "", "", " ", "\n", "\t ", "\r\n  "]))

    def value(self, v: object) -> None:
        if isinstance(v, dict):
            self.members(list(v.items()))
        elif isinstance(v, list):
            self.put("[")
            for i, item in enumerate(v):
                self.put("," if i else "")
                self.ws(), self.value(item), self.ws()
            self.put("]")
        elif isinstance(v, str) and v[:1].isascii() and v[:1].isalpha() and self.rnd.random() < 0.3:
            self.put(f'"\\u{ord(v[0]):04x}' + json.dumps(v[1:])[1:])  # a needless escape, as in "\u0071uery"
        else:
            self.put(json.dumps(v, ensure_ascii=self.rnd.random() < 0.5))

    def members(self, items: list[tuple[str, object]], mark: str | None = None) -> int | None:
        """Write an object; return the offset of `mark`'s string value's closing quote."""
        quote_at = None
        self.put("{")
        for i, (k, v) in enumerate(items):
            self.put("," if i else "")
            self.ws(), self.value(k), self.ws(), self.put(":"), self.ws()
            self.value(v)
            if k == mark and isinstance(v, str):
                quote_at = self.size - 1
            self.ws()
        self.ws(), self.put("}")
        return quote_at


@dataclass
class _Plan:
    index: int
    id: str
    name: str
    args: str
    expected: str | None  # the progress value tool_call_started must carry
    quote_at: int | None  # offset of the progress value's closing quote
    cuts: list[int] = field(default_factory=list)
    name_piece: int = 0  # which fragment carries the name


@st.composite
def plans(draw: st.DrawFn, index: int) -> _Plan:
    rnd = draw(st.randoms(use_true_random=False))
    name = draw(st.sampled_from(sorted(PROGRESS)))
    key = PROGRESS[name]
    items = list(draw(st.dictionaries(keys.filter(lambda k: k != key), json_values, max_size=4)).items())
    kind = draw(st.sampled_from(["string", "string", "non-string", "absent", "empty"]))
    if kind == "empty":
        args, quote_at, expected = draw(st.sampled_from(["", " ", "\n"])), None, None
    else:
        if key is not None and kind != "absent":
            value = draw(strings if kind == "string" else non_string_values)
            items.insert(draw(st.integers(0, len(items))), (key, value))
        writer = _Writer(rnd)
        writer.ws()
        quote_at = writer.members(items, mark=key)
        writer.ws()
        args = "".join(writer.parts)
        found = json.loads(args).get(key) if key else None
        expected = found if isinstance(found, str) else None
    cuts = sorted(set(draw(st.lists(st.integers(0, len(args)), max_size=12))))
    name_piece = draw(st.sampled_from([0, 0, 0, len(cuts)]))  # sometimes the name comes last
    return _Plan(index, f"id{index}", name, args, expected, quote_at, cuts, name_piece)


def _deltas(plan: _Plan) -> list[tuple[ToolCallDelta, int, int]]:
    """(delta, start offset, end offset) per fragment of one call."""
    bounds = [0, *plan.cuts, len(plan.args)]
    out = []
    for n, (a, b) in enumerate(itertools.pairwise(bounds)):
        name = plan.name if n == plan.name_piece else None
        delta = ToolCallDelta(plan.index, plan.id if n == 0 else None, name, plan.args[a:b])
        out.append((delta, a, b))
    return out


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_split_and_interleaving_assembles_and_starts_each_call_once(data: st.DataObject) -> None:
    calls = [data.draw(plans(i)) for i in range(data.draw(st.integers(1, 3)))]
    per_call = [_deltas(p) for p in calls]
    order = [i for i, d in enumerate(per_call) for _ in d] + [-1] * data.draw(st.integers(0, 3))
    data.draw(st.randoms(use_true_random=False)).shuffle(order)

    stream: list[tuple[object, int, int, int]] = []  # (item, call, start, end)
    cursors = [0] * len(calls)
    for who in order:
        if who < 0:
            stream.append((TextDelta(f"t{len(stream)}"), -1, 0, 0))
            continue
        delta, a, b = per_call[who][cursors[who]]
        cursors[who] += 1
        stream.append((delta, who, a, b))

    asm = StreamAssembler(PROGRESS.get)
    fired = [(pos, ev) for pos, (item, *_) in enumerate(stream) for ev in asm.feed(item)]
    fired += [(len(stream), ev) for ev in asm.finish()]

    assert asm.tool_calls() == [
        ToolCall(id=p.id, name=p.name, arguments=p.args if p.args.strip() else "{}") for p in calls
    ]
    assert asm.text == "".join(item.text for item, who, *_ in stream if who < 0)
    assert sorted(ev.index for _, ev in fired) == list(range(len(calls)))  # exactly once each
    for pos, ev in fired:
        plan = calls[ev.index]
        assert (ev.id, ev.name, ev.progress_value) == (plan.id, plan.name, plan.expected)
        assert pos == _due(plan, stream), (plan, pos)


def _due(plan: _Plan, stream: list[tuple[object, int, int, int]]) -> int:
    """Where the start must fire: once the name is known and, for a progress tool,
    the fragment holding the value's closing quote (or the object's end) has come."""
    mine = [(pos, a, b) for pos, (_, who, a, b) in enumerate(stream) if who == plan.index]
    name_pos = mine[plan.name_piece][0]
    if PROGRESS[plan.name] is None:
        return name_pos
    if plan.expected is not None:
        decisive = plan.quote_at
    elif plan.args.strip():
        decisive = plan.args.rstrip().rindex("}")  # the object closes without a value
    else:
        return len(stream)  # empty arguments: only the stream's end tells
    holder = next(pos for pos, a, b in mine if a <= decisive < b)
    return max(holder, name_pos)
