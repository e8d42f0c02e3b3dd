"""`PartialJson`: the partial object of a streamed typed answer, each character read once (#47).

Properties over random JSON values split at random points: after every fragment,
`text[:upto] + close` parses; at the end
it is the value. Linearity is counted in `work` (steps and closer characters), not timed.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine.partial_json import PartialJson

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=25,
)


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


@settings(max_examples=300, deadline=None)
@given(VALUES, st.lists(st.integers(0, 10_000), max_size=30), st.booleans(), st.booleans())
def test_every_prefix_completes_to_json_and_the_end_is_the_value(
    value: Any, cuts: list[int], ascii_: bool, indent: bool
):
    text = json.dumps(value, ensure_ascii=ascii_, indent=2 if indent else None)
    scanner = PartialJson()
    seen = 0
    for fragment in _split(text, cuts):
        scanner.feed(fragment)
        seen += len(fragment)
        assert scanner.upto <= seen
        if scanner.upto:  # 0: no value has begun yet (a number's first "-", a literal's first letters)
            json.loads(text[: scanner.upto] + scanner.close)  # raises if the completion is not JSON
    assert scanner.upto == len(text.rstrip()) or isinstance(value, (int, float)) and scanner.upto == len(text)
    assert scanner.close == "" and json.loads(text[: scanner.upto]) == value


def test_the_partial_object_shows_finished_fields_and_the_string_being_written():
    scanner = PartialJson()
    text = ""
    seen = []
    for fragment in ['{"name": "Par', 'is", "popu', "lation", '": 21', "00000, ", '"tags": ["a", "b', '"]}']:
        scanner.feed(fragment)
        text += fragment
        seen.append(json.loads(text[: scanner.upto] + scanner.close))
    assert seen == [
        {"name": "Par"},
        {"name": "Paris"},
        {"name": "Paris"},  # a key without its value is left out until it has one
        {"name": "Paris", "population": 21},
        {"name": "Paris", "population": 2100000},
        {"name": "Paris", "population": 2100000, "tags": ["a", "b"]},
        {"name": "Paris", "population": 2100000, "tags": ["a", "b"]},
    ]
    assert scanner.done and scanner.close == ""


def test_escapes_split_across_fragments_are_never_cut():
    text = json.dumps({"s": 'a"b\\c\u00e9\n\U0001f600'})  # \" \\ \u00e9 \n \ud83d\ude00
    for size in range(1, 8):
        scanner = PartialJson()
        for i in range(0, len(text), size):
            scanner.feed(text[i : i + size])
            partial = json.loads(text[: scanner.upto] + scanner.close)
            assert 'a"b\\c\u00e9\n\U0001f600'.startswith(partial.get("s", "")[:-1] if partial.get("s") else "")
        assert json.loads(text[: scanner.upto]) == json.loads(text)


def test_text_that_is_not_json_ends_the_scan_where_it_was_last_whole():
    scanner = PartialJson()
    scanner.feed('{"a": 1, "b": tru')
    scanner.feed("x}")
    assert scanner.done and json.loads('{"a": 1, "b": trux}'[: scanner.upto] + scanner.close) == {"a": 1}


def test_nesting_past_the_limit_ends_the_scan():
    scanner = PartialJson(limit=3)
    scanner.feed("[[[[1]]]]")
    assert scanner.done and json.loads("[[[[1]]]]"[: scanner.upto] + scanner.close) == [[[]]]


def _work(size: int, delta: int, depth: int) -> int:
    value: Any = {"body": 'x, "q" \\ y ' * (size // 12), "n": list(range(size // 200))}
    for _ in range(depth):
        value = {"inner": value, "k": "v"}
    text = json.dumps(value)
    scanner = PartialJson()
    for i in range(0, len(text), delta):
        scanner.feed(text[i : i + delta])
    assert scanner.done and json.loads(text[: scanner.upto]) == value
    return scanner.work


def test_work_is_linear_in_the_answer_whatever_the_deltas():
    """Doubling the answer doubles the work; 10-byte deltas cost a bounded factor over one fragment,
    and the factor does not grow with the answer's size (a re-parse per delta would make it ~size/10)."""
    small, large = _work(50_000, 10, depth=20), _work(100_000, 10, depth=20)
    assert 1.8 < large / small < 2.2
    whole = _work(100_000, 10**9, depth=20)
    assert large < 40 * whole
    assert _work(200_000, 10, depth=20) / _work(200_000, 10**9, depth=20) < 1.2 * large / whole
