"""Unit tests for orchestrator.engine.streaming: delta assembly and progress detection."""

from __future__ import annotations

import itertools
import json
import time

import pytest

from orchestrator.core.messages import ToolCall
from orchestrator.engine.streaming import CallStarted, ProgressScanner, StreamAssembler
from providers.stream import (
    ProviderBlock,
    StreamEnd,
    StreamRestart,
    TextDelta,
    ToolCallDelta,
)

PROGRESS = {"search": "query", "write_file": "path", "plain": None}


def assembler() -> StreamAssembler:
    return StreamAssembler(lambda name: PROGRESS.get(name))


def feed_all(asm: StreamAssembler, items: list) -> list[tuple[int, CallStarted]]:
    """Feed items; return (position of the item that fired it, event) for each start."""
    fired = [(i, ev) for i, item in enumerate(items) for ev in asm.feed(item)]
    return fired + [(len(items), ev) for ev in asm.finish()]


def call_deltas(index: int, args: str, cuts: list[int], *, id: str | None = "c", name: str | None = "search") -> list:
    """The first fragment carries id and name (and the text before the first cut)."""
    bounds = [0, *cuts, len(args)]
    pieces = [args[a:b] for a, b in itertools.pairwise(bounds)]
    first = ToolCallDelta(index, id, name, pieces[0])
    return [first, *(ToolCallDelta(index, None, None, p) for p in pieces[1:])]


def scan_at_every_split(text: str, key: str) -> None:
    """For every two-way split, the value comes from the fragment holding its closing quote."""
    expected = json.loads(text).get(key)
    expected = expected if isinstance(expected, str) else None
    for cut in range(len(text) + 1):
        scanner = ProgressScanner(key)
        first, second = scanner.feed(text[:cut]), scanner.feed(text[cut:])
        assert scanner.done, (text, cut)
        got = first if first is not None else second
        assert got == expected, (text, cut)
        assert first is None or second is None  # exactly once


# -- text, blocks, shapes ---------------------------------------------------------


def test_text_accumulates_and_provider_blocks_keep_order():
    asm = assembler()
    for item in [
        TextDelta("Hel"),
        ProviderBlock({"type": "server_tool_use", "id": "s1"}),
        TextDelta("lo"),
        ProviderBlock({"type": "web_search_tool_result", "tool_use_id": "s1"}),
    ]:
        assert asm.feed(item) == []
    assert asm.text == "Hello"
    assert [b["type"] for b in asm.provider_blocks] == ["server_tool_use", "web_search_tool_result"]
    assert asm.tool_calls() == []


def test_one_delta_with_id_name_and_arguments_fires_with_value():
    asm = assembler()
    fired = asm.feed(ToolCallDelta(0, "call_1", "search", '{"query": "cats", "limit": 3}'))
    assert fired == [CallStarted(0, "call_1", "search", "cats")]
    assert asm.finish() == []
    assert asm.tool_calls() == [ToolCall(id="call_1", name="search", arguments='{"query": "cats", "limit": 3}')]


def test_fires_on_the_fragment_with_the_closing_quote_and_before_the_rest():
    args = '{"query": "big cats", "limit": 3, "extra": "' + "x" * 50 + '"}'
    close = args.index('"', args.index("big cats"))
    items = call_deltas(0, args, [5, 12, close, close + 1, close + 10])
    fired = feed_all(assembler(), items)
    assert fired == [(3, CallStarted(0, "c", "search", "big cats"))]  # pieces: ..close) | [close..close+1)
    assert len(items) > 4  # the rest of the call was still to come


def test_closing_quote_as_first_character_of_a_fragment():
    args = '{"query": "ab"}'
    close = args.index('b"') + 1
    items = call_deltas(0, args, [close])
    assert feed_all(assembler(), items) == [(1, CallStarted(0, "c", "search", "ab"))]


def test_tool_without_progress_argument_or_unknown_fires_when_name_known():
    asm = assembler()
    assert asm.feed(ToolCallDelta(0, "a", "plain", "")) == [CallStarted(0, "a", "plain", None)]
    assert asm.feed(ToolCallDelta(1, "b", "nope", '{"query"')) == [CallStarted(1, "b", "nope", None)]
    assert asm.feed(ToolCallDelta(1, None, None, ': "x"}')) == []
    assert asm.finish() == []
    assert [c.arguments for c in asm.tool_calls()] == ["{}", '{"query": "x"}']


def test_name_arriving_after_arguments():
    asm = assembler()
    assert asm.feed(ToolCallDelta(0, "c9", None, '{"query": "do')) == []
    assert asm.feed(ToolCallDelta(0, None, None, 'gs", "n"')) == []  # value closed, name unknown
    assert asm.feed(ToolCallDelta(0, None, "search", ": 1")) == [CallStarted(0, "c9", "search", "dogs")]
    assert asm.feed(ToolCallDelta(0, None, None, "}")) == []
    assert asm.tool_calls()[0] == ToolCall(id="c9", name="search", arguments='{"query": "dogs", "n": 1}')


def test_name_arriving_before_the_value_closes():
    asm = assembler()
    assert asm.feed(ToolCallDelta(0, "c9", None, '{"query": "do')) == []
    assert asm.feed(ToolCallDelta(0, None, "search", "g")) == []
    assert asm.feed(ToolCallDelta(0, None, None, 's"}')) == [CallStarted(0, "c9", "search", "dogs")]


def test_parallel_calls_sequential_and_interleaved():
    asm = assembler()
    items = [
        ToolCallDelta(0, "a", "search", ""),
        ToolCallDelta(1, "b", "write_file", ""),
        ToolCallDelta(2, "c", "plain", '{"x"'),
        ToolCallDelta(0, None, None, '{"query": "on'),
        ToolCallDelta(1, None, None, '{"content": "hi", "pa'),
        ToolCallDelta(0, None, None, 'e"'),
        ToolCallDelta(1, None, None, 'th": "/tmp/f"'),
        ToolCallDelta(2, None, None, ": 1}"),
        ToolCallDelta(1, None, None, "}"),
        ToolCallDelta(0, None, None, "}"),
    ]
    fired = feed_all(asm, items)
    assert fired == [
        (2, CallStarted(2, "c", "plain", None)),
        (5, CallStarted(0, "a", "search", "one")),
        (6, CallStarted(1, "b", "write_file", "/tmp/f")),
    ]
    assert asm.tool_calls() == [
        ToolCall(id="a", name="search", arguments='{"query": "one"}'),
        ToolCall(id="b", name="write_file", arguments='{"content": "hi", "path": "/tmp/f"}'),
        ToolCall(id="c", name="plain", arguments='{"x": 1}'),
    ]


def test_calls_listed_in_index_order_whatever_the_arrival_order():
    asm = assembler()
    asm.feed(ToolCallDelta(3, "d", "plain", "{}"))
    asm.feed(ToolCallDelta(1, "b", "plain", "{}"))
    assert [c.id for c in asm.tool_calls()] == ["b", "d"]


def test_exactly_once_even_with_more_fragments_and_finish():
    asm = assembler()
    items = call_deltas(0, '{"query": "a", "query2": "b", "x": {"query": "c"}}', [3, 11, 13, 20, 30, 40])
    fired = feed_all(asm, items)
    assert [ev for _, ev in fired] == [CallStarted(0, "c", "search", "a")]
    assert asm.finish() == []


# -- when there is no value -------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        '{"opts": {"query": "inner"}}',
        '{"list": [{"query": "x"}, "query", ["query"]]}',
        '{"s": "\\"query\\": \\"fake\\"", "q": "}"}',
        '{"query": 5}',
        '{"query": null}',
        '{"query": true}',
        '{"query": {"query": "x"}}',
        '{"query": ["x"]}',
        "{}",
    ],
)
def test_no_top_level_string_fires_none_when_the_object_closes(args):
    asm = assembler()
    items = call_deltas(0, args, list(range(1, len(args))))  # one character per fragment
    fired = feed_all(asm, items)
    assert fired == [(len(items) - 1, CallStarted(0, "c", "search", None))]


def test_nested_same_name_key_does_not_fire_but_the_top_level_one_does():
    args = '{"opts": {"query": "inner", "deep": [{"query": "x"}]}, "s": "{\\"query\\": \\"no\\"}", "query": "outer"}'
    scan_at_every_split(args, "query")
    asm = assembler()
    fired = feed_all(asm, call_deltas(0, args, list(range(1, len(args)))))
    assert [ev.progress_value for _, ev in fired] == ["outer"]


def test_duplicate_key_non_string_then_string_gives_the_string():
    assert [ProgressScanner("q").feed('{"q": 1, "q": "two"}')] == ["two"]


def test_truncated_or_empty_arguments_fire_at_finish():
    asm = assembler()
    assert asm.feed(ToolCallDelta(0, "a", "search", '{"query": "unfinis')) == []
    assert asm.feed(ToolCallDelta(1, "b", "search", "")) == []  # a new index is not an end
    assert asm.finish() == [CallStarted(0, "a", "search", None), CallStarted(1, "b", "search", None)]
    assert asm.finish() == []
    assert [c.arguments for c in asm.tool_calls()] == ['{"query": "unfinis', "{}"]


def test_whitespace_only_arguments_mean_empty_object():
    asm = assembler()
    asm.feed(ToolCallDelta(0, "a", "plain", " \n"))
    assert asm.tool_calls()[0].arguments == "{}"


def test_arguments_that_are_not_an_object_fire_none_at_once():
    asm = assembler()
    assert asm.feed(ToolCallDelta(0, "a", "search", '["query"')) == [CallStarted(0, "a", "search", None)]


def test_call_without_name_or_id_at_finish():
    asm = assembler()
    asm.feed(ToolCallDelta(4, None, None, "{}"))
    [started] = asm.finish()
    [call] = asm.tool_calls()
    assert started.name == "" and started.progress_value is None
    assert started.id == call.id and call.id.startswith("call_4_") and len(call.id) > len("call_4_")


def test_synthesised_id_is_the_same_in_event_and_history():
    asm = assembler()
    [started] = asm.feed(ToolCallDelta(0, None, "search", '{"query": "x"}'))
    other = assembler()
    [other_started] = other.feed(ToolCallDelta(0, None, "search", '{"query": "x"}'))
    assert started.id.startswith("call_0_") and asm.tool_calls()[0].id == started.id
    assert other_started.id != started.id


# -- JSON details -----------------------------------------------------------------


def test_whitespace_everywhere_json_allows():
    args = ' \n\t{ \r\n "a" \t: \n [ 1 , { "query" : "n" } ] \n, \t"query"\n:\r\n"v a l"\n}\n '
    scan_at_every_split(args, "query")
    asm = assembler()
    fired = feed_all(asm, call_deltas(0, args, list(range(1, len(args)))))
    assert [ev.progress_value for _, ev in fired] == ["v a l"]


@pytest.mark.parametrize(
    "value",
    [
        'say \\"hi\\" and \\\\ back\\\\',
        "tab\\tnew\\nline\\r\\b\\f\\/",
        "\\u00e9t\\u00C9 caf\\u00e9",
        "emoji \\ud83d\\ude00 done",
        "literal é 😀 ünïcode",
        '\\\\\\"',
        "",
    ],
)
def test_escapes_decoded_at_every_split_point(value):
    text = '{"a": "x\\"y", "query": "' + value + '", "b": 2}'
    assert json.loads(text)["query"] is not None
    scan_at_every_split(text, "query")


def test_value_split_inside_a_surrogate_pair_across_deltas():
    asm = assembler()
    pieces = ['{"query": "a\\ud8', "3d\\", "ude", '00b"', "}"]
    fired = feed_all(
        asm, [ToolCallDelta(0, "c", "search", pieces[0])] + [ToolCallDelta(0, None, None, p) for p in pieces[1:]]
    )
    assert fired == [(3, CallStarted(0, "c", "search", "a\U0001f600b"))]


def test_split_right_after_a_backslash_escaping_a_quote():
    scanner = ProgressScanner("q")
    assert scanner.feed('{"q": "a\\') is None
    assert scanner.feed('"') is None  # escaped, not the end
    assert scanner.feed('b"') == 'a"b'
    assert scanner.done and scanner.feed("}") is None


@pytest.mark.parametrize(
    ("key_json", "key", "matches"),
    [
        ('"\\u0071"', "q", True),
        ('"q\\"x"', 'q"x', True),
        ('"a\\\\b"', "a\\b", True),
        ('"q\\"x"', "q", False),
        ('"qq"', "q", False),
        ('"\\ud83d\\ude00"', "😀", True),
    ],
)
def test_keys_with_escapes(key_json, key, matches):
    text = "{" + key_json + ': "v"}'
    for cut in range(len(text) + 1):
        scanner = ProgressScanner(key)
        results = [scanner.feed(text[:cut]), scanner.feed(text[cut:])]
        assert [r for r in results if r is not None] == (["v"] if matches else [])


def test_raw_control_characters_in_the_value_are_kept():
    assert ProgressScanner("q").feed('{"q": "a\nb"}') == "a\nb"


def test_empty_string_value_is_a_value_not_none():
    scanner = ProgressScanner("q")
    assert scanner.feed('{"q": ""') == ""
    assert scanner.done


def test_not_an_object_makes_the_scanner_done_without_value():
    for text in ['"query"', "[]", "  x", '{"a" 1}', '{"a": 1 "query": "x"}']:
        scanner = ProgressScanner("query")
        assert scanner.feed(text) is None
        assert scanner.done, text


def test_scanner_waits_across_empty_and_whitespace_fragments():
    scanner = ProgressScanner("q")
    for fragment in ["", "  ", "{", "", '"', "q", '"', " ", ":", " ", '"']:
        assert scanner.feed(fragment) is None
        assert not scanner.done
    assert scanner.feed('x"') == "x"


# -- restart and misuse -----------------------------------------------------------


def test_reset_discards_everything_and_calls_start_again():
    asm = assembler()
    asm.feed(TextDelta("partial"))
    asm.feed(ProviderBlock({"type": "server_tool_use"}))
    assert asm.feed(ToolCallDelta(0, "a", "search", '{"query": "x"}')) == [CallStarted(0, "a", "search", "x")]
    asm.feed(ToolCallDelta(1, "b", "search", '{"query": "unfin'))
    asm.reset()
    assert (asm.text, asm.provider_blocks, asm.tool_calls(), asm.finish()) == ("", [], [], [])
    assert asm.feed(ToolCallDelta(0, "a2", "search", '{"query": "y"}')) == [CallStarted(0, "a2", "search", "y")]
    assert asm.tool_calls() == [ToolCall(id="a2", name="search", arguments='{"query": "y"}')]


@pytest.mark.parametrize("item", [StreamRestart(attempt=2, reason="503"), StreamEnd("stop", "m", "p")])
def test_feed_refuses_control_items_with_a_clear_error(item):
    with pytest.raises(TypeError, match=r"reset\(\).*finish\(\)"):
        assembler().feed(item)


def test_a_megabyte_in_ten_byte_deltas_is_scanned_in_linear_time():
    """A guard against quadratic regressions (re-joining or re-parsing per delta
    takes minutes here); the real numbers are in bench/progress.py."""
    args = json.dumps({"query": 'a "quoted" \\ line\n café 😀 ' * 40_000, "n": 1}, ensure_ascii=False)
    deltas = [ToolCallDelta(0, "c", "search", "")] + [
        ToolCallDelta(0, None, None, args[i : i + 10]) for i in range(0, len(args), 10)
    ]
    asm = assembler()
    start = time.perf_counter()
    fired = [ev for d in deltas for ev in asm.feed(d)]
    elapsed = time.perf_counter() - start
    assert [ev.progress_value for ev in fired] == [json.loads(args)["query"]]
    assert len(args) > 1_000_000 and elapsed < 2.0, elapsed
