"""How a stream ended, on every path: end markers, in-band errors, kept blocks (#14, #23); tool calls
assembled by id are in test_call_assembly.py.

Each stream below is the byte shape the named vendor sends (see tests/fixtures/streams/README.md
for the recorded corpus). `auto` is the runtime's OpenAI-wire reader; `litellm` is
`litellm.acompletion`'s stream wrapper with `providers/streams/litellm_tap.py` watching the raw events.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest
import respx

from orchestrator.core.messages import Message, ToolCall
from orchestrator.engine.views import side_view
from providers.client import ModelClient
from providers.config import config_from_dict
from providers.stream import (
    ProviderBlock,
    ProviderError,
    ReasoningDelta,
    RefusalDelta,
    StreamEnd,
    StreamRestart,
    TextDelta,
    ToolCallDelta,
)

URL = "https://vendor.test/v1/chat/completions"
PATHS = ["auto", "litellm"]


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return f"data: {json.dumps(body)}\n\n"


USAGE = (
    'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
    '"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}\n\n'
)
SNOWFLAKE = chunk({"role": "assistant", "content": "Hello"}) + chunk({"content": " there"}) + USAGE + "data: [DONE]\n\n"
CUT = chunk({"role": "assistant", "content": "Hel"})  # neither [DONE] nor a finish_reason
GROQ_TOOL_USE_FAILED = chunk({"role": "assistant", "content": ""}) + (
    'data: {"error":{"message":"Failed to call a function. Please adjust your prompt. See \'failed_generation\' '
    'for more details.","type":"invalid_request_error","code":"tool_use_failed","failed_generation":"<function=x>",'
    '"status_code":400}}\n\n'
)
OPENROUTER_400 = chunk({"role": "assistant", "content": ""}) + (
    'data: {"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"m","error":{"code":400,'
    '"message":"Provider returned error"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}\n\n'
)
OVERLOADED = (
    chunk({"role": "assistant", "content": ""}) + 'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n'
)


def client_for(path: str, monkeypatch: pytest.MonkeyPatch, attempts: int = 2) -> ModelClient:
    monkeypatch.setenv("VENDOR_KEY", "vendor-key-000000")
    return ModelClient(
        config_from_dict(
            {
                "providers": {
                    "vendor": {
                        "type": "openai",
                        "base_url": "https://vendor.test/v1",
                        "api_key": "${VENDOR_KEY}",
                        "stream": path,
                    }
                },
                "models": {"m": {"provider": "vendor", "model": "m", "retry": {"attempts": attempts, "backoff": 0}}},
            }
        ),
        sleep=_no_sleep,
    )


async def _no_sleep(_: float) -> None:
    return None


def sse(body: str) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


async def run(
    client: ModelClient, body: str, url: str = URL, alias: str = "m", **kwargs: Any
) -> tuple[list[Any], respx.Route]:
    with respx.mock() as router:
        route = router.post(url__regex=url.replace(".", r"\.") + ".*").mock(side_effect=lambda _: sse(body))
        items = [i async for i in client.stream(alias, [{"role": "user", "content": "hi"}], **kwargs)]
    return items, route


@pytest.mark.parametrize("path", PATHS)
async def test_snowflake_stream_with_done_and_no_finish_reason_is_an_answer(path, monkeypatch):
    items, route = await run(client_for(path, monkeypatch), SNOWFLAKE)
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Hello there"
    end = items[-1]
    assert isinstance(end, StreamEnd) and end.finish == "stop" and end.finish_reason is None
    assert (end.usage.input_tokens, end.usage.output_tokens) == (7, 3)
    assert route.call_count == 1


@pytest.mark.parametrize("path", PATHS)
async def test_stream_without_done_or_finish_reason_is_cut_retried_then_an_error(path, monkeypatch):
    client = client_for(path, monkeypatch, attempts=2)
    with pytest.raises(ProviderError) as err:
        await run(client, CUT)
    assert err.value.retryable and err.value.kind in ("connection", "stream_cut")
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=lambda _: sse(CUT))
        items: list[Any] = []
        with pytest.raises(ProviderError):
            async for item in client.stream("m", [{"role": "user", "content": "hi"}]):
                items.append(item)
    assert route.call_count == 2 and any(isinstance(i, StreamRestart) for i in items)
    assert not any(isinstance(i, StreamEnd) for i in items)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "body", [GROQ_TOOL_USE_FAILED, OPENROUTER_400], ids=["groq_tool_use_failed", "openrouter_code_400"]
)
async def test_inband_400_is_a_bad_request_and_not_retried(path, body, monkeypatch):
    client = client_for(path, monkeypatch, attempts=3)
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=lambda _: sse(body))
        with pytest.raises(ProviderError) as err:
            _ = [i async for i in client.stream("m", [{"role": "user", "content": "hi"}])]
    assert route.call_count == 1
    assert (err.value.kind, err.value.status, err.value.retryable) == ("bad_request", 400, False)


@pytest.mark.parametrize("path", PATHS)
async def test_inband_server_error_is_still_retried(path, monkeypatch):
    client = client_for(path, monkeypatch, attempts=2)
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=lambda _: sse(OVERLOADED))
        with pytest.raises(ProviderError) as err:
            _ = [i async for i in client.stream("m", [{"role": "user", "content": "hi"}])]
    assert route.call_count == 2 and err.value.retryable and err.value.status == 500


@pytest.mark.parametrize("path", PATHS)
async def test_reasoning_and_refusal_come_as_their_own_items(path, monkeypatch):
    body = (
        chunk({"role": "assistant", "content": None, "reasoning_content": "Weigh it."})
        + chunk({"content": ""})
        + chunk({"refusal": "I can't help with that."})
        + chunk({}, "stop")
        + "data: [DONE]\n\n"
    )
    items, _ = await run(client_for(path, monkeypatch), body)
    assert [i.text for i in items if isinstance(i, ReasoningDelta)] == ["Weigh it."]
    assert [i.text for i in items if isinstance(i, RefusalDelta)] == ["I can't help with that."]
    assert not [i for i in items if isinstance(i, TextDelta) and i.text]
    assert (items[-1].finish, items[-1].finish_reason) == ("refusal", "stop")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("raw", "finish"), [("length", "length"), ("content_filter", "content_filter")])
async def test_length_and_content_filter_finishes_are_normalized(path, raw, finish, monkeypatch):
    items, _ = await run(
        client_for(path, monkeypatch), chunk({"content": "Half an ans"}) + chunk({}, raw) + "data: [DONE]\n\n"
    )
    assert (items[-1].finish, items[-1].finish_reason) == (finish, raw)


# -- Gemini on LiteLLM's path: the real end, ids and thought signatures ---------------------

SIGNATURE = "EpIDCpwDAdHtim9" + "x" * 500
GEMINI_FRAMES = [
    {
        "candidates": [
            {"content": {"parts": [{"text": "Checking the weather.", "thought": True}], "role": "model"}, "index": 0}
        ],
        "modelVersion": "gemini-2.5-flash",
    },
    {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {
                            "functionCall": {"id": "96c1su3s", "name": "get_weather", "args": {"city": "Paris"}},
                            "thoughtSignature": SIGNATURE,
                        }
                    ],
                    "role": "model",
                },
                "index": 0,
            }
        ],
        "modelVersion": "gemini-2.5-flash",
    },
    {
        "candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 9, "totalTokenCount": 21},
        "modelVersion": "gemini-2.5-flash",
    },
]
GEMINI_URL = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def gemini_body(frames: list[dict[str, Any]]) -> str:
    return "".join(f"data: {json.dumps(f)}\r\n\r\n" for f in frames)


@pytest.fixture
def multi(monkeypatch: pytest.MonkeyPatch) -> ModelClient:
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key-000000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "anthropic-key-000000")
    return ModelClient(
        config_from_dict(
            {
                "providers": {
                    "gemini": {"api_key": "${GEMINI_API_KEY}"},
                    "anthropic": {"api_key": "${ANTHROPIC_API_KEY}"},
                },
                "models": {
                    "gem": {"provider": "gemini", "model": "gemini-2.5-flash", "retry": {"attempts": 2, "backoff": 0}},
                    "claude": {
                        "provider": "anthropic",
                        "model": "claude-sonnet-4-5",
                        "params": {"max_tokens": 1024},
                        "retry": {"attempts": 2, "backoff": 0},
                    },
                },
            }
        ),
        sleep=_no_sleep,
    )


async def test_gemini_call_id_is_the_providers_and_the_signature_travels_apart(multi):
    items, _ = await run(multi, gemini_body(GEMINI_FRAMES), GEMINI_URL, "gem", tools=TOOLS)
    calls = [i for i in items if isinstance(i, ToolCallDelta)]
    assert [(c.id, c.name, c.signature) for c in calls] == [("96c1su3s", "get_weather", SIGNATURE)]
    assert [i.text for i in items if isinstance(i, ReasoningDelta)] == ["Checking the weather."]
    assert (items[-1].finish, items[-1].finish_reason) == ("tool_calls", "STOP")


async def test_gemini_stream_without_finish_reason_is_cut_on_litellms_path(multi):
    with respx.mock() as router:
        route = router.post(url__regex=GEMINI_URL.replace(".", r"\.") + ".*").mock(
            side_effect=lambda _: sse(gemini_body(GEMINI_FRAMES[:2]))
        )
        with pytest.raises(ProviderError) as err:
            _ = [i async for i in multi.stream("gem", [{"role": "user", "content": "hi"}], tools=TOOLS)]
    # type: gemini is read by the native reader on `stream: auto`: its cut is a dropped connection (retried too)
    assert route.call_count == 2 and err.value.kind in ("stream_cut", "connection") and err.value.retryable


async def test_gemini_signature_is_sent_back_with_the_call_and_the_id_unchanged(multi):
    history = [
        Message(thread_id="t", side="a", role="user", content="weather?"),
        Message(
            thread_id="t",
            side="a",
            role="assistant",
            tool_calls=[ToolCall(id="96c1su3s", name="get_weather", arguments='{"city":"Paris"}', signature=SIGNATURE)],
        ),
        Message(thread_id="t", side="a", role="tool", tool_call_id="96c1su3s", name="get_weather", content="sunny"),
    ]
    messages = side_view("a", history, "system", family="gemini")
    with respx.mock() as router:
        route = router.post(url__regex=GEMINI_URL.replace(".", r"\.") + ".*").mock(
            side_effect=lambda _: sse(gemini_body(GEMINI_FRAMES[2:]))
        )
        _ = [i async for i in multi.stream("gem", messages, tools=TOOLS)]
    sent = json.loads(route.calls[0].request.content)
    model_turn = next(c for c in sent["contents"] if c["role"] == "model")
    part = next(p for p in model_turn["parts"] if "functionCall" in p or "function_call" in p)
    function_call = part.get("functionCall") or part["function_call"]
    assert part["thoughtSignature"] == SIGNATURE and function_call.get("id", "96c1su3s") == "96c1su3s"
    assert "__thought__" not in json.dumps(sent)
    assert "thought_signature" not in json.dumps(side_view("a", history, "system", family="openai"))


# -- Anthropic on LiteLLM's path: thinking, MCP connector pairs, unknown blocks -------------


def anthropic_event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]] = ()) -> str:  # type: ignore[assignment]
    out = anthropic_event(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
    )
    out += "".join(
        anthropic_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        for d in deltas
    )
    return out + anthropic_event("content_block_stop", {"type": "content_block_stop", "index": index})


MCP_USE = {
    "type": "mcp_tool_use",
    "id": "mcptoolu_01",
    "name": "echo",
    "server_name": "example-mcp",
    "input": {"text": "hi"},
}
MCP_RESULT = {
    "type": "mcp_tool_result",
    "tool_use_id": "mcptoolu_01",
    "is_error": False,
    "content": [{"type": "text", "text": "hi"}],
}
FUTURE = {"type": "container_upload", "file_id": "file_01"}
ANTHROPIC_MCP = (
    anthropic_event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 20, "output_tokens": 1},
            },
        },
    )
    + block(
        0,
        {"type": "thinking", "thinking": "", "signature": ""},
        [
            {"type": "thinking_delta", "thinking": "Use the echo tool."},
            {"type": "signature_delta", "signature": "EqQBsig0"},
        ],
    )
    + block(1, MCP_USE)
    + block(2, MCP_RESULT)
    + block(3, FUTURE)
    + block(4, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "It said hi."}])
    + anthropic_event(
        "message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}}
    )
    + anthropic_event("message_stop", {"type": "message_stop"})
)


async def test_anthropic_mcp_pair_and_unknown_blocks_kept_in_order_with_signed_thinking(multi):
    items, _ = await run(multi, ANTHROPIC_MCP, "https://api.anthropic.com/v1/messages", "claude")
    assert [i.block for i in items if isinstance(i, ProviderBlock)] == [MCP_USE, MCP_RESULT, FUTURE]
    reasoning = [i for i in items if isinstance(i, ReasoningDelta)]
    assert "".join(r.text for r in reasoning) == "Use the echo tool." and reasoning[-1].signature == "EqQBsig0"
    assert (items[-1].finish, items[-1].finish_reason) == ("stop", "end_turn")


async def test_anthropic_mcp_turn_and_thinking_are_replayed(multi):
    history = [
        Message(thread_id="t", side="a", role="user", content="echo hi"),
        Message(
            thread_id="t",
            side="a",
            role="assistant",
            content="It said hi.",
            provider_blocks=[MCP_USE, MCP_RESULT, FUTURE],
            reasoning=[
                {"type": "thinking", "thinking": "Use the echo tool.", "signature": "EqQBsig0", "provider": "anthropic"}
            ],
        ),
        Message(thread_id="t", side="a", role="user", content="again"),
    ]
    messages = side_view("a", history, "system", family="anthropic")
    with respx.mock() as router:
        route = router.post("https://api.anthropic.com/v1/messages").mock(side_effect=lambda _: sse(ANTHROPIC_MCP))
        _ = [i async for i in multi.stream("claude", messages)]
    sent = json.loads(route.calls[0].request.content)
    turn = next(m for m in sent["messages"] if m["role"] == "assistant")
    kinds = [b["type"] for b in turn["content"]]
    assert kinds.index("mcp_tool_use") < kinds.index("mcp_tool_result") and "container_upload" in kinds
    thinking = next(b for b in turn["content"] if b["type"] == "thinking")
    assert thinking["signature"] == "EqQBsig0" and kinds.index("thinking") < kinds.index("text")
    assert "reasoning" not in json.dumps(side_view("b", history, "other side"))  # the other side never sees it


# -- every provider's finishes, on LiteLLM's path (the native readers add theirs) ----------


def anthropic_stream(*blocks: str, stop: str | None, output: int = 9, stop_event: bool = True) -> str:
    out = anthropic_event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_02",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 11, "output_tokens": 1},
            },
        },
    )
    out += "".join(blocks)
    if stop is not None:
        out += anthropic_event(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": output}},
        )
    if stop_event:
        out += anthropic_event("message_stop", {"type": "message_stop"})
    return out


TEXT_BLOCK = block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "Part of it"}])
CUT_CALL = block(
    1,
    {"type": "tool_use", "id": "toolu_09", "name": "get_weather", "input": {}},
    [{"type": "input_json_delta", "partial_json": '{"ci'}],
)


@pytest.mark.parametrize(
    ("stop", "finish", "blocks"),
    [
        ("max_tokens", "length", (TEXT_BLOCK, CUT_CALL)),
        ("tool_use", "tool_calls", (TEXT_BLOCK, CUT_CALL)),
        ("refusal", "refusal", (TEXT_BLOCK,)),
        ("end_turn", "stop", (TEXT_BLOCK,)),
        ("pause_turn", "length", (TEXT_BLOCK,)),  # unfinished, as the native reader says too
    ],
)
async def test_anthropic_stop_reasons_are_normalized_and_kept_raw(multi, stop, finish, blocks):
    items, _ = await run(multi, anthropic_stream(*blocks, stop=stop), "https://api.anthropic.com/v1/messages", "claude")
    assert (items[-1].finish, items[-1].finish_reason) == (finish, stop)


async def test_anthropic_stream_cut_before_its_stop_reason_is_retried_then_an_error(multi):
    body = anthropic_stream(TEXT_BLOCK, stop=None, stop_event=False)
    with respx.mock() as router:
        route = router.post("https://api.anthropic.com/v1/messages").mock(side_effect=lambda _: sse(body))
        with pytest.raises(ProviderError) as err:
            _ = [i async for i in multi.stream("claude", [{"role": "user", "content": "hi"}])]
    assert route.call_count == 2 and err.value.retryable


@pytest.mark.parametrize(
    ("error", "status", "calls"),
    [
        ({"type": "overloaded_error", "message": "Overloaded"}, 529, 2),
        ({"type": "invalid_request_error", "message": "prompt is too long"}, 400, 1),
    ],
)
async def test_anthropic_error_event_is_mapped_by_its_type(multi, error, status, calls):
    body = anthropic_stream(TEXT_BLOCK, stop=None, stop_event=False) + anthropic_event(
        "error", {"type": "error", "error": error}
    )
    with respx.mock() as router:
        route = router.post("https://api.anthropic.com/v1/messages").mock(side_effect=lambda _: sse(body))
        with pytest.raises(ProviderError) as err:
            _ = [i async for i in multi.stream("claude", [{"role": "user", "content": "hi"}])]
    assert route.call_count == calls and err.value.status == status and err.value.retryable is (calls > 1)


def gemini_frame(parts: list[dict[str, Any]], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", **extra}


USAGE_META = {"usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8}}


@pytest.mark.parametrize(
    ("raw", "finish"),
    [
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "error"),
        ("STOP", "stop"),
    ],
)
async def test_gemini_finish_reasons_are_normalized_and_kept_raw(multi, raw, finish):
    body = gemini_body([gemini_frame([{"text": "Some"}]), gemini_frame([{"text": " text"}], raw, **USAGE_META)])
    items, _ = await run(multi, body, GEMINI_URL, "gem")
    assert (items[-1].finish, items[-1].finish_reason) == (finish, raw)


async def test_gemini_blocked_prompt_is_a_content_filter_end(multi):
    body = gemini_body(
        [{"promptFeedback": {"blockReason": "SAFETY"}, **USAGE_META, "modelVersion": "gemini-2.5-flash"}]
    )
    items, _ = await run(multi, body, GEMINI_URL, "gem")
    assert (items[-1].finish, items[-1].finish_reason) == ("content_filter", "SAFETY")


@pytest.mark.parametrize(("code", "status", "calls"), [(429, 429, 2), (400, 400, 1)])
async def test_gemini_inband_error_is_mapped_by_its_code(multi, code, status, calls):
    body = gemini_body([gemini_frame([{"text": "Some"}]), {"error": {"code": code, "message": "no", "status": "X"}}])
    with respx.mock() as router:
        route = router.post(url__regex=GEMINI_URL.replace(".", r"\.") + ".*").mock(side_effect=lambda _: sse(body))
        with pytest.raises(ProviderError) as err:
            _ = [i async for i in multi.stream("gem", [{"role": "user", "content": "hi"}])]
    assert route.call_count == calls and err.value.status == status


def _groq(monkeypatch: Any, model: str, *, attempts: int) -> ModelClient:
    """A client for alias "g": `type: groq`, read by LiteLLM's own OpenAI-compatible iterator."""
    monkeypatch.setenv("GROQ_API_KEY", "groq-key-000000")
    provider = {"groq": {"api_key": "${GROQ_API_KEY}"}}
    models = {"g": {"provider": "groq", "model": model, "retry": {"attempts": attempts}}}
    return ModelClient(config_from_dict({"providers": provider, "models": models}), sleep=_no_sleep)


async def test_groq_provider_type_maps_its_inband_400_too(monkeypatch):
    """`type: groq` streams through LiteLLM's own Groq iterator (not the openai SDK); LiteLLM fails on the
    string `code` there (a ValueError), the tap still reads the error's own status."""
    client = _groq(monkeypatch, "llama-3.3-70b-versatile", attempts=3)
    good = chunk({"role": "assistant", "content": "Hi"}) + chunk({}, "stop") + "data: [DONE]\n\n"
    items, _ = await run(client, good, "https://api.groq.com/openai/v1/chat/completions", "g")
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["Hi"] and items[-1].finish == "stop"
    with respx.mock() as router:
        route = router.post("https://api.groq.com/openai/v1/chat/completions").mock(
            side_effect=lambda _: sse(GROQ_TOOL_USE_FAILED)
        )
        with pytest.raises(ProviderError) as err:
            _ = [i async for i in client.stream("g", [{"role": "user", "content": "hi"}])]
    assert route.call_count == 1 and (err.value.kind, err.value.status) == ("bad_request", 400)


async def test_a_llama_model_on_litellms_stream_is_priced_without_fetching_a_tokenizer(monkeypatch):
    """LiteLLM prices a streamed answer as it opens. For a Llama model it counts the prompt with a
    HuggingFace tokenizer that it downloads on the event loop: 23 s of retries before the runtime kept
    LiteLLM offline, and a lookup of huggingface.co, which the network guard in conftest.py fails.
    Parser: LiteLLM's own OpenAI-compatible iterator (`type: groq`)."""
    client = _groq(monkeypatch, "llama-3.1-8b-instant", attempts=1)
    body = (
        chunk({"role": "assistant", "content": "Hi"})
        + chunk({}, "stop", usage={"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8})
        + "data: [DONE]\n\n"
    )
    items, route = await run(client, body, "https://api.groq.com/openai/v1/chat/completions", "g")
    end = items[-1]
    assert route.call_count == 1 and [i.text for i in items if isinstance(i, TextDelta)] == ["Hi"]
    assert (end.finish, end.usage.input_tokens, end.usage.output_tokens) == ("stop", 7, 1)


def test_a_host_that_wants_litellm_online_keeps_it_online(monkeypatch):
    """The runtime sets LiteLLM's offline mode only where the host application said nothing."""
    import providers.client as client_module

    monkeypatch.setenv("LITELLM_OFFLINE_MODE", "false")
    monkeypatch.setattr(client_module, "_LITELLM", None)  # configure LiteLLM again, as in a fresh process
    client_module.warm_up()
    assert os.environ["LITELLM_OFFLINE_MODE"] == "false"
    monkeypatch.delenv("LITELLM_OFFLINE_MODE")
    monkeypatch.setattr(client_module, "_LITELLM", None)
    client_module.warm_up()
    assert os.environ["LITELLM_OFFLINE_MODE"] == "true"
