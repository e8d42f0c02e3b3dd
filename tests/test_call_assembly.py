"""Tool calls assembled by id, on every path (#14 item 3): a new id at an index in use starts a new
call, calls streamed without `index` are not merged, contradictory deltas are a retried provider
error, and an id is kept exactly as the server sent it. The bytes are OpenAI-compatible SSE, read by
the runtime's wire reader (`auto`) and by LiteLLM's stream (`litellm`)."""

from __future__ import annotations

from typing import Any

import pytest
import respx
from test_stream_ends import PATHS, URL, chunk, client_for, run, sse

from providers.stream import ProviderError, ToolCallDelta


def call(index: int | None, call_id: str | None, name: str | None, args: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "function": {"arguments": args}}
    if index is not None:
        out["index"] = index
    if call_id:
        out["id"] = call_id
    if name:
        out["function"]["name"] = name
    return out


def calls_of(items: list[Any]) -> list[tuple[str | None, str | None, str]]:
    calls: dict[int, list[Any]] = {}
    for d in (i for i in items if isinstance(i, ToolCallDelta)):
        entry = calls.setdefault(d.index, [None, None, ""])
        entry[0], entry[1] = entry[0] or d.id, entry[1] or d.name
        entry[2] += d.arguments
    return [tuple(c) for _, c in sorted(calls.items())]  # type: ignore[misc]


PARALLEL_NO_INDEX = (
    chunk({"tool_calls": [call(None, "call_a", "get_weather", "{}")]})
    + chunk({"tool_calls": [call(None, "call_b", "get_time", "{}")]})
    + chunk({}, "tool_calls")
    + "data: [DONE]\n\n"
)
NEW_ID_AT_USED_INDEX = (
    chunk({"tool_calls": [call(0, "call_a", "get_weather", '{"city":')]})
    + chunk({"tool_calls": [call(0, None, None, '"Oslo"}')]})
    + chunk({"tool_calls": [call(0, "call_b", "get_time", '{"tz":')]})
    + chunk({"tool_calls": [call(0, None, None, '"UTC"}')]})
    + chunk({}, "tool_calls")
    + "data: [DONE]\n\n"
)


@pytest.mark.parametrize("path", PATHS)
async def test_parallel_calls_without_index_are_not_merged(path, monkeypatch):
    items, _ = await run(client_for(path, monkeypatch), PARALLEL_NO_INDEX)
    assert calls_of(items) == [("call_a", "get_weather", "{}"), ("call_b", "get_time", "{}")]


async def test_a_new_id_at_an_index_in_use_starts_a_new_call(monkeypatch):
    items, _ = await run(client_for("auto", monkeypatch), NEW_ID_AT_USED_INDEX)
    assert calls_of(items) == [("call_a", "get_weather", '{"city":"Oslo"}'), ("call_b", "get_time", '{"tz":"UTC"}')]


async def test_contradictory_call_deltas_are_a_retried_provider_error(monkeypatch):
    body = (
        chunk({"tool_calls": [call(0, "call_a", "get_weather", "{}")]})
        + chunk({"tool_calls": [call(1, "call_a", None, "")]})
        + chunk({}, "tool_calls")
        + "data: [DONE]\n\n"
    )
    client = client_for("auto", monkeypatch, attempts=2)
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=lambda _: sse(body))
        with pytest.raises(ProviderError) as err:
            _ = [i async for i in client.stream("m", [{"role": "user", "content": "hi"}])]
    assert route.call_count == 2 and err.value.kind == "stream_invalid" and "call_a" in str(err.value)


async def test_the_wire_reader_keeps_an_id_exactly_as_sent(monkeypatch):
    """Only LiteLLM's own Gemini path packs `__thought__` into ids; an OpenAI-compatible server's id
    (a LiteLLM proxy's included, which wants it back unchanged) is never rewritten."""
    packed = "call_1__thought__c2lnbmF0dXJl"
    body = chunk({"tool_calls": [call(0, packed, "get_weather", "{}")]}) + chunk({}, "tool_calls") + "data: [DONE]\n\n"
    items, _ = await run(client_for("auto", monkeypatch), body)
    assert [(d.id, d.signature) for d in items if isinstance(d, ToolCallDelta)] == [(packed, None)]
