"""The runtime's Anthropic reader (`stream: auto`) against `litellm.acompletion` (`stream: litellm`).

Both paths must send the same bytes and, over a corpus of streams in the shape of Anthropic's documented
examples (tests/fixtures/anthropic/), yield the same items. Where LiteLLM's path loses something (thinking,
MCP and unknown blocks, the raw stop reason, the type of an `error` event) the test asserts what ours keeps.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from providers.client import ModelClient
from providers.config import config_from_dict
from providers.stream import (
    ProviderBlock,
    ProviderError,
    ReasoningDelta,
    StreamEnd,
    StreamRestart,
    TextDelta,
    ToolCallDelta,
)
from providers.streams.anthropic_wire import AnthropicReader
from providers.streams.litellm_params import editable_copy

URL = "https://api.anthropic.com/v1/messages"
KEY = "sk-ant-test-wire-0123456789"
FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": n,
            "description": n,
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
        },
    }
    for n in ("get_weather", "get_time", "report_progress")
]
SSE_HEADERS = {"content-type": "text/event-stream"}


def client(
    stream: str, *, params: dict[str, Any] | None = None, attempts: int = 1, base_url: str | None = None
) -> ModelClient:
    provider: dict[str, Any] = {
        "type": "anthropic",
        "api_key": "${ANTHROPIC_WIRE_KEY}",
        "headers": {"X-Team": "bench"},
        "stream": stream,
    }
    if base_url:
        provider["base_url"] = base_url
    return ModelClient(
        config_from_dict(
            {
                "providers": {"claude": provider},
                "models": {
                    "m": {
                        "provider": "claude",
                        "model": "claude-sonnet-4-5",
                        "params": {"max_tokens": 1024, **(params or {})},
                        "retry": {"attempts": attempts, "backoff": 0},
                    }
                },
            }
        ),
        sleep=_no_sleep,
    )


async def _no_sleep(_: float) -> None:
    return None


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_WIRE_KEY", KEY)


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def sse(body: bytes, status: int = 200) -> httpx.Response:
    return httpx.Response(status, headers=SSE_HEADERS, content=body)


async def run(c: ModelClient, **kwargs: Any) -> list[Any]:
    return [item async for item in c.stream("m", MESSAGES, tools=TOOLS, **kwargs)]


async def both(body: bytes, **kwargs: Any) -> dict[str, list[Any]]:
    items = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            router.post(URL).mock(return_value=sse(body))
            items[mode] = await run(client(mode), **kwargs)
    return items


def comparable(items: list[Any]) -> list[Any]:
    """What both paths must agree on: an empty argument fragment carries nothing (LiteLLM forwards Anthropic's
    leading `""`), and the end's raw reason, normalized word and model are compared separately."""
    kept = [
        i for i in items if not (isinstance(i, ToolCallDelta) and not i.arguments and i.id is None and i.name is None)
    ]
    return [replace(i, finish_reason=None, finish="stop", model="") if isinstance(i, StreamEnd) else i for i in kept]


# -- the request -------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "extra"),
    [
        ({"temperature": 0.2}, {"tool_choice": "auto"}),
        (
            {"stop": ["END"], "top_p": 0.9},
            {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": False},
        ),
        ({"reasoning_effort": "low", "max_tokens": 4096}, {}),  # thinking: LiteLLM adds the budget and the beta header
        (
            {"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096},
            {"web_search_options": {"search_context_size": "low"}},
        ),
        ({}, {"user": "u-2"}),
    ],
)
async def test_both_paths_send_the_same_request(params, extra):
    sent = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            route = router.post(URL).mock(return_value=sse(fixture("text.sse")))
            await run(client(mode, params=params), extra=extra)
        request = route.calls[0].request
        sent[mode] = (str(request.url), request.content, {k: v for k, v in request.headers.items()})
    assert sent["auto"] == sent["litellm"]
    body = json.loads(sent["auto"][1])
    assert body["stream"] is True and body["model"] == "claude-sonnet-4-5" and sent["auto"][2]["x-api-key"] == KEY


async def test_base_url_and_a_history_with_tool_results_build_the_same_request():
    history = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_01A",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01A", "content": "18 \u00b0C, caf\u00e9 weather"},
    ]
    sent = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            route = router.post("http://gateway.invalid/anthropic/v1/messages").mock(
                return_value=sse(fixture("text.sse"))
            )
            [
                i
                async for i in client(mode, base_url="http://gateway.invalid/anthropic").stream(
                    "m", history, tools=TOOLS
                )
            ]
        sent[mode] = (str(route.calls[0].request.url), route.calls[0].request.content)
    assert sent["auto"] == sent["litellm"]


async def test_json_mode_stays_on_litellms_path():
    """`response_format` becomes a hidden tool whose answer LiteLLM turns back into text: only its stream does that."""
    answer = fixture("tool_use.sse").replace(b"get_weather", b"json_tool_call")
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse(answer))
        items = await run(client("auto"), extra={"response_format": {"type": "json_object"}})
    assert not [i for i in items if isinstance(i, ToolCallDelta)]
    assert json.loads("".join(i.text for i in items if isinstance(i, TextDelta)).split(":", 1)[-1].strip()) == {
        "location": "San Francisco, CA",
        "unit": "fahrenheit",
    }


# -- the items ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "raw", "finish"),
    [
        ("text.sse", "end_turn", "stop"),
        ("tool_use.sse", "tool_use", "tool_calls"),
        ("parallel_tools.sse", "tool_use", "tool_calls"),
        ("no_argument_tool.sse", "tool_use", "tool_calls"),
        ("progress_escapes.sse", "tool_use", "tool_calls"),
        ("web_search.sse", "end_turn", "stop"),
        ("max_tokens.sse", "max_tokens", "length"),
        ("pause_turn.sse", "pause_turn", "length"),
    ],
)
async def test_both_paths_yield_the_same_items(name, raw, finish):
    items = await both(fixture(name))
    assert comparable(items["auto"]) == comparable(items["litellm"]) and len(items["auto"]) > 1
    end = items["auto"][-1]
    assert (end.finish_reason, end.finish) == (raw, finish)
    assert end.model == "anthropic/claude-sonnet-4-5-20250929"  # the snapshot that answered, as on the OpenAI wire


@pytest.mark.parametrize("raw", ["end_turn", "stop_sequence", "a_reason_added_later"])
async def test_an_answer_with_tool_calls_ends_as_tool_calls_on_both_paths(raw):
    """One finish table (providers/finish.py): a stop word other than `tool_use` on an answer that holds
    tool calls was `stop` in the native reader and `tool_calls` on LiteLLM's path."""
    body = fixture("tool_use.sse").replace(b'"stop_reason":"tool_use"', f'"stop_reason":"{raw}"'.encode())
    items = await both(body)
    assert {mode: (i[-1].finish_reason, i[-1].finish) for mode, i in items.items()} == {
        "auto": (raw, "tool_calls"),
        "litellm": (raw, "tool_calls"),
    }


def calls(items: list[Any]) -> list[tuple[str | None, str | None, Any]]:
    assembled: dict[int, dict[str, Any]] = {}
    for d in (i for i in items if isinstance(i, ToolCallDelta)):
        call = assembled.setdefault(d.index, {"id": None, "name": None, "args": ""})
        call["id"], call["name"] = call["id"] or d.id, call["name"] or d.name
        call["args"] += d.arguments
    return [(c["id"], c["name"], json.loads(c["args"])) for _, c in sorted(assembled.items())]


async def test_parallel_calls_no_argument_call_and_escapes_assemble():
    parallel, no_args, escapes = [
        await both(fixture(n)) for n in ("parallel_tools.sse", "no_argument_tool.sse", "progress_escapes.sse")
    ]
    assert calls(parallel["auto"]) == [
        ("toolu_01A", "get_weather", {"location": "Paris"}),
        ("toolu_01B", "get_weather", {"location": "Tokyo"}),
    ]
    assert calls(no_args["auto"]) == [("toolu_01N", "get_time", {})]
    assert calls(escapes["auto"]) == [
        (
            "toolu_01E",
            "report_progress",
            {"message": 'Caf\u00e9 "quoted" \\ backslash\nnew line, \u65e5\u672c\u8a9e, \U0001f600 done', "step": 2},
        )
    ]


async def test_thinking_is_kept_with_its_signature():
    """LiteLLM's path yields no reasoning at all; ours keeps the text and the signature Anthropic needs back."""
    items = await both(fixture("thinking.sse"))
    reasoning = [i for i in items["auto"] if isinstance(i, ReasoningDelta)]
    assert "".join(r.text for r in reasoning).endswith("So GCD(1071, 462) = 21")
    assert [r.signature for r in reasoning if r.signature] == [
        "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds..."
    ]

    def without_reasoning(found: list) -> list:
        return [i for i in found if not isinstance(i, ReasoningDelta)]

    # LiteLLM's path keeps thinking too (through the tap), in its own fragments: compare the rest
    assert comparable(without_reasoning(items["auto"])) == comparable(without_reasoning(items["litellm"]))


async def test_refusal_is_its_own_finish():
    items = await both(fixture("refusal.sse"))
    assert comparable(items["auto"]) == comparable(items["litellm"])
    assert (items["auto"][-1].finish_reason, items["auto"][-1].finish) == ("refusal", "refusal")
    assert items["litellm"][-1].finish_reason == "refusal"  # the tap reads the raw stop reason LiteLLM folds away


async def test_every_server_block_is_kept_verbatim_and_in_order():
    """LiteLLM's path drops `mcp_tool_use`, redacted thinking and block types it does not know."""
    items = await both(fixture("server_blocks.sse"))
    blocks = [i.block for i in items["auto"] if isinstance(i, ProviderBlock)]
    assert [b["type"] for b in blocks] == [
        "mcp_tool_use",
        "mcp_tool_result",
        "code_execution_tool_result",
        "future_block_type",
    ]
    assert blocks[0] == {
        "type": "mcp_tool_use",
        "id": "mcptoolu_014Q35RayjACSWkSj4X2yov1",
        "name": "echo",
        "server_name": "example-mcp",
        "input": {"param": "Hello"},
    }
    assert blocks[3] == {"type": "future_block_type", "opaque": {"kept": True}}
    assert [i.redacted for i in items["auto"] if isinstance(i, ReasoningDelta)] == [
        "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
    ]
    theirs = [i.block for i in items["litellm"] if isinstance(i, ProviderBlock)]
    assert all(b in blocks for b in theirs)  # the tap keeps them on LiteLLM's path too
    assert not [i for i in items["auto"] if isinstance(i, ToolCallDelta)]  # server calls are not ours to run


async def test_server_tool_call_is_a_provider_block_with_its_input():
    items = await both(fixture("web_search.sse"))
    first = next(i.block for i in items["auto"] if isinstance(i, ProviderBlock))
    assert first == {
        "type": "server_tool_use",
        "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
        "name": "web_search",
        "input": {"query": "weather NYC today"},
    }


def test_renamed_tools_come_back_under_the_callers_name():
    reader = AnthropicReader({"get_weather_abc123": "get_weather" * 8})
    items = reader.feed(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather_abc123", "input": {}},
        }
    )
    assert items == [ToolCallDelta(0, "toolu_1", "get_weather" * 8, "")]


# -- how a stream ends -------------------------------------------------------


def _cut_between_events() -> bytes:
    body = fixture("text.sse")
    return body[: body.rindex(b"event: message_stop")]


def _cut_mid_event() -> bytes:
    body = fixture("tool_use.sse")
    return body[: body.index(b'"partial_json":" Francisc') + 10]


@pytest.mark.parametrize(
    "body", [_cut_between_events(), _cut_mid_event(), b""], ids=["between-events", "mid-event", "empty"]
)
async def test_a_cut_stream_is_retried_then_an_error(body):
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=[sse(body), sse(fixture("text.sse"))])
        items = await run(client("auto", attempts=2))
    assert route.call_count == 2 and items[-1].attempts == 2
    assert any(isinstance(i, StreamRestart) for i in items) == bool(body)  # items from the cut stream are taken back
    assert "".join(i.text for i in items[_after_restart(items) :] if isinstance(i, TextDelta)) == "Hello!"
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse(body))
        with pytest.raises(ProviderError) as info:
            await run(client("auto"))
    assert info.value.retryable and info.value.kind == "connection"


def _after_restart(items: list[Any]) -> int:
    restarts = [n for n, i in enumerate(items) if isinstance(i, StreamRestart)]
    return restarts[-1] + 1 if restarts else 0


class _DropAfter(httpx.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._body
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


async def test_connection_lost_after_message_stop_keeps_the_answer():
    with respx.mock() as router:
        route = router.post(URL).mock(
            return_value=httpx.Response(200, headers=SSE_HEADERS, stream=_DropAfter(fixture("text.sse")))
        )
        items = await run(client("auto", attempts=2))
    assert route.call_count == 1 and items[-1].finish == "stop"
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Hello!"


async def test_overloaded_error_event_is_retried():
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=[sse(fixture("error_overloaded.sse")), sse(fixture("text.sse"))])
        items = await run(client("auto", attempts=2))
    assert route.call_count == 2 and isinstance(items[-1], StreamEnd) and items[-1].attempts == 2


async def test_invalid_request_error_event_is_not_retried():
    """LiteLLM's own stream reports every `error` event as a 500 (retried); the event's type says 400."""
    with respx.mock() as router:
        route = router.post(URL).mock(return_value=sse(fixture("error_invalid_request.sse")))
        with pytest.raises(ProviderError, match="text content blocks must be non-empty") as info:
            await run(client("auto", attempts=3))
    assert route.call_count == 1 and info.value.kind == "bad_request" and not info.value.retryable


async def test_http_errors_map_like_litellms():
    body = {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your rate limit"},
    }
    kinds = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            router.post(URL).mock(return_value=httpx.Response(429, json=body, headers={"retry-after": "0"}))
            with pytest.raises(ProviderError, match="rate limit") as info:
                await run(client(mode))
        kinds[mode] = (info.value.kind, info.value.status, info.value.retryable)
    assert kinds["auto"] == kinds["litellm"] == ("rate_limit", 429, True)


async def test_the_key_never_appears_in_an_error():
    with respx.mock() as router:
        router.post(URL).mock(
            return_value=httpx.Response(
                401,
                json={
                    "type": "error",
                    "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
                },
            )
        )
        with pytest.raises(ProviderError) as info:
            await run(client("auto"))
    assert info.value.kind == "auth" and KEY not in str(info.value)


async def test_the_callers_messages_are_left_as_they_were():
    messages = json.loads(json.dumps(MESSAGES))
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse(fixture("text.sse")))
        [i async for i in client("auto").stream("m", messages, tools=TOOLS)]
    assert messages == MESSAGES


def test_the_copy_litellm_edits_shares_no_container_with_the_callers():
    """The readers hand LiteLLM's transforms a copy of the messages and the remembered parameters (they
    edit them in place); a JSON-shaped value is copied container by container, anything else deep-copied."""
    odd = {"a"}
    value = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "odd": odd, "n": 1.5}
    copied = editable_copy(value)
    assert copied == value
    copied["messages"][0]["content"][0]["text"] = "changed"
    copied["odd"].add("b")
    assert value["messages"][0]["content"][0]["text"] == "hi" and odd == {"a"}


async def test_a_remembered_parameter_mapping_builds_the_same_request_again():
    sent = []
    for mode in ("auto", "auto", "litellm"):
        with respx.mock() as router:
            route = router.post(URL).mock(return_value=sse(fixture("text.sse")))
            await run(
                client(mode, params={"temperature": 0.3, "reasoning_effort": "low", "max_tokens": 4096}),
                extra={"tool_choice": "auto"},
            )
        sent.append(route.calls[0].request.content)
    assert sent[0] == sent[1] == sent[2]


async def test_an_unsupported_param_fails_every_time_before_any_request():
    for mode in ("auto", "auto", "litellm"):
        with respx.mock(assert_all_called=False) as router:
            route = router.post(URL).mock(return_value=sse(fixture("text.sse")))
            with pytest.raises(ProviderError, match="logit_bias") as info:
                await run(client(mode, params={"logit_bias": {"1": 2}}))
        assert not route.called and info.value.kind == "bad_request", mode


async def test_an_eval_runs_seed_is_left_out_for_anthropic_which_has_none():
    from providers.client import seeded

    for mode in ("auto", "litellm"):
        with respx.mock() as router, seeded(11):
            route = router.post(URL).mock(return_value=sse(fixture("text.sse")))
            items = await run(client(mode))
        assert items and "seed" not in json.loads(route.calls[0].request.content), mode
