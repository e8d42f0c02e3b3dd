"""Each provider's documented streaming bytes, read by the runtime's own readers, seen through ModelClient.

OpenAI bytes are read by `providers/streams/openai_wire.py`, Anthropic by `providers/streams/anthropic_wire.py`, Gemini by
`providers/streams/gemini_wire.py`; with `stream: litellm`, by LiteLLM's stream wrapper watched by `providers/streams/litellm_tap.py`.

The SSE bodies below are written out by hand in the shape of the providers'
API references (OpenAI Chat Completions streaming, Anthropic Messages streaming
incl. server tools, Gemini streamGenerateContent?alt=sse), so the test does not
depend on our own builders; a second test checks `providers.sse` builds bytes
that parse the same way.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from providers.client import ModelClient
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse
from providers.stream import ProviderBlock, StreamEnd, TextDelta, ToolCallDelta

OPENAI_SSE = """\
data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Checking both."},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"location\\": \\"Par"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"is\\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_def","type":"function","function":{"name":"get_time","arguments":"{\\"tz\\": \\"CET\\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":82,"completion_tokens":41,"total_tokens":123}}

data: [DONE]

"""

ANTHROPIC_SSE = """\
event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let's check"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the weather."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"location\\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \\"San Francisco, CA\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_02","name":"get_time","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\\"tz\\": \\"PST\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""

ANTHROPIC_WEB_SEARCH_SSE = """\
event: message_start
data: {"type":"message_start","message":{"id":"msg_01G","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2679,"output_tokens":3}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"query\\":\\"weather NYC today\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","content":[{"type":"web_search_result","title":"Weather in New York City","url":"https://www.timeanddate.com/weather/usa/new-york","encrypted_content":"Ev0DCioIAxgCIiQ3NmU4","page_age":null}]}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"It is sunny."}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":510,"server_tool_use":{"web_search_requests":1}}}

event: message_stop
data: {"type":"message_stop"}

"""

GEMINI_SSE = (
    'data: {"candidates": [{"content": {"parts": [{"text": "Let me look"}],"role": "model"},"index": 0}],'
    '"usageMetadata": {"promptTokenCount": 30,"totalTokenCount": 30},"modelVersion": "gemini-2.5-flash"}\r\n\r\n'
    'data: {"candidates": [{"content": {"parts": [{"text": " that up."}, {"functionCall": {"name": "get_weather","args": {"location": "Paris"}}},'
    '{"functionCall": {"name": "get_time","args": {"tz": "CET"}}}],"role": "model"},"finishReason": "STOP","index": 0}],'
    '"usageMetadata": {"promptTokenCount": 30,"candidatesTokenCount": 12,"totalTokenCount": 42},"modelVersion": "gemini-2.5-flash"}\r\n\r\n'
)

TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("get_weather", "get_time")
]


@pytest.fixture
def client(monkeypatch) -> ModelClient:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-000000000000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-000000000000")
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-test-0000000000000000000")
    return ModelClient(
        config_from_dict(
            {
                "providers": {p: {"api_key": f"${{{p.upper()}_API_KEY}}"} for p in ("openai", "anthropic", "gemini")},
                "models": {
                    "gpt": {"provider": "openai", "model": "gpt-4o-mini", "retry": {"attempts": 1}},
                    "claude": {
                        "provider": "anthropic",
                        "model": "claude-sonnet-4-5",
                        "retry": {"attempts": 1},
                        "params": {"max_tokens": 1024},
                    },
                    "gem": {"provider": "gemini", "model": "gemini-2.5-flash", "retry": {"attempts": 1}},
                },
            }
        )
    )


def sse_response(body: str) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


async def collect(client: ModelClient, alias: str, **kwargs: Any) -> list[Any]:
    return [i async for i in client.stream(alias, [{"role": "user", "content": "weather?"}], tools=TOOLS, **kwargs)]


def assembled(items: list[Any]) -> tuple[str, list[tuple[str | None, str | None, Any]]]:
    """Text, and (id, name, parsed arguments) per tool-call index."""
    text = "".join(i.text for i in items if isinstance(i, TextDelta))
    calls: dict[int, dict[str, Any]] = {}
    for d in (i for i in items if isinstance(i, ToolCallDelta)):
        call = calls.setdefault(d.index, {"id": None, "name": None, "args": ""})
        call["id"] = call["id"] or d.id
        call["name"] = call["name"] or d.name
        call["args"] += d.arguments
    return text, [(c["id"], c["name"], json.loads(c["args"])) for _, c in sorted(calls.items())]


async def test_openai_documented_stream(client):
    with respx.mock() as router:
        route = router.post("https://api.openai.com/v1/chat/completions").mock(return_value=sse_response(OPENAI_SSE))
        items = await collect(client, "gpt")
    text, calls = assembled(items)
    assert text == "Checking both."
    assert calls == [("call_abc", "get_weather", {"location": "Paris"}), ("call_def", "get_time", {"tz": "CET"})]
    end = items[-1]
    assert isinstance(end, StreamEnd) and end.finish_reason == "tool_calls"
    assert (end.usage.input_tokens, end.usage.output_tokens) == (82, 41) and end.usage.cost > 0
    sent = json.loads(route.calls[0].request.content)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert route.calls[0].request.headers["authorization"] == "Bearer sk-test-openai-000000000000"


async def test_anthropic_documented_stream(client):
    with respx.mock() as router:
        route = router.post("https://api.anthropic.com/v1/messages").mock(return_value=sse_response(ANTHROPIC_SSE))
        items = await collect(client, "claude")
    text, calls = assembled(items)
    assert text == "Okay, let's check the weather."
    assert calls == [
        ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", {"location": "San Francisco, CA"}),
        ("toolu_02", "get_time", {"tz": "PST"}),
    ]
    end = items[-1]
    assert (end.finish_reason, end.finish, end.provider) == ("tool_use", "tool_calls", "anthropic")
    assert (end.usage.input_tokens, end.usage.output_tokens) == (472, 89)
    sent = json.loads(route.calls[0].request.content)
    assert sent["max_tokens"] == 1024 and sent["tools"][0]["name"] == "get_weather"
    assert route.calls[0].request.headers["x-api-key"] == "sk-ant-test-000000000000"


async def test_anthropic_server_tool_blocks_become_provider_blocks(client):
    with respx.mock() as router:
        router.post("https://api.anthropic.com/v1/messages").mock(return_value=sse_response(ANTHROPIC_WEB_SEARCH_SSE))
        items = await collect(client, "claude", extra={"web_search_options": {"search_context_size": "low"}})
    blocks = [i.block for i in items if isinstance(i, ProviderBlock)]
    assert blocks[0] == {
        "type": "server_tool_use",
        "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
        "name": "web_search",
        "input": {"query": "weather NYC today"},
    }
    assert blocks[1]["type"] == "web_search_tool_result"
    assert blocks[1]["tool_use_id"] == "srvtoolu_014hJH82Qum7Td6UV8gDXThB"
    assert blocks[1]["content"][0]["url"] == "https://www.timeanddate.com/weather/usa/new-york"
    assert len(blocks) == 2  # cumulative lists from LiteLLM are not repeated
    assert not [i for i in items if isinstance(i, ToolCallDelta)]  # server tools are not ours to run
    text, _ = assembled(items)
    assert text == "It is sunny." and (items[-1].finish_reason, items[-1].finish) == ("end_turn", "stop")


async def test_gemini_documented_stream(client):
    with respx.mock() as router:
        route = router.post(
            url__regex=r"generativelanguage\.googleapis\.com/v1beta/models/gemini-2\.5-flash:streamGenerateContent"
        ).mock(return_value=sse_response(GEMINI_SSE))
        items = await collect(client, "gem")
    text, calls = assembled(items)
    assert text == "Let me look that up."
    assert [(name, args) for _, name, args in calls] == [
        ("get_weather", {"location": "Paris"}),
        ("get_time", {"tz": "CET"}),
    ]
    assert all(call_id for call_id, _, _ in calls)  # Gemini sends none; the reader makes them
    end = items[-1]
    assert (end.finish_reason, end.finish) == ("STOP", "tool_calls") and (
        end.usage.input_tokens,
        end.usage.output_tokens,
    ) == (30, 12)
    request = route.calls[0].request
    assert request.url.params["alt"] == "sse"
    assert json.loads(request.content)["tools"][0]["function_declarations"][0]["name"] == "get_weather"


@pytest.mark.parametrize(("wire", "alias"), [("openai", "gpt"), ("anthropic", "claude"), ("gemini", "gem")])
async def test_builders_produce_bytes_the_readers_parse(client, wire, alias):
    script = [
        ScriptedResponse(
            text="Two calls coming.",
            chunk_size=5,
            usage=(21, 13),
            tool_calls=[ScriptedCall("get_weather", {"location": "Oslo"}), ScriptedCall("get_time", {"tz": "UTC"})],
        )
    ]
    model = ScriptedModel(script, wire=wire)
    with model.serving("https://api.openai.com/v1" if wire == "openai" else None):
        items = await collect(client, alias)
    text, calls = assembled(items)
    assert text == "Two calls coming."
    assert [(n, a) for _, n, a in calls] == [("get_weather", {"location": "Oslo"}), ("get_time", {"tz": "UTC"})]
    if wire != "gemini":
        assert [i for i, _, _ in calls] == [f"{'toolu' if wire == 'anthropic' else 'call'}_01_{n}" for n in (0, 1)]
    end = items[-1]
    assert (
        end.finish_reason if wire == "openai" else end.finish
    ) == "tool_calls"  # OpenAI's raw value is already the word
    assert (end.usage.input_tokens, end.usage.output_tokens) == (21, 13)
    assert len(model.requests) == 1
