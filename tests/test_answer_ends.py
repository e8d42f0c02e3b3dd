"""What an execution does with how an answer ended: truncation, refusals, filters, reasoning (#14 item 2).

The model answers with recorded-shape OpenAI-wire bytes through respx, so the runtime's own
reader, the assembler and the executor all run; storage is real SQLite.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from support import Q, definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import SCRIPTED_BASE_URL, config_from_dict

RAN: list[str] = []
STORES: dict[str, Any] = {}
SENT: list[str] = []


async def _lookup(state: Any, args: Q) -> ToolResult:
    RAN.append(args.q)
    return ToolResult(status="success", result="found")


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "demo",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


def answer(*deltas: dict[str, Any], finish: str) -> str:
    return "".join(chunk(d) for d in deltas) + chunk({}, finish) + "data: [DONE]\n\n"


TRUNCATED_CALL = answer(
    {"role": "assistant", "content": "Let me look"},
    {
        "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "ord'}}
        ]
    },
    finish="length",
)


URLS = {
    "scripted": f"{SCRIPTED_BASE_URL}/chat/completions",
    "anthropic": r"https://api\.anthropic\.com/v1/messages",
    "gemini": r"https://generativelanguage\.googleapis\.com/v1beta/models/gemini-2\.5-flash:streamGenerateContent.*",
}
PROVIDERS = {
    "scripted": {"type": "scripted"},
    "anthropic": {"api_key": "${ANTHROPIC_API_KEY}"},
    "gemini": {"api_key": "${GEMINI_API_KEY}"},
}
MODELS = {
    "scripted": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}},
    "anthropic": {
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "params": {"max_tokens": 64},
        "retry": {"attempts": 1},
    },
    "gemini": {"provider": "gemini", "model": "gemini-2.5-flash", "retry": {"attempts": 1}},
}


def _anthropic_event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


ANTHROPIC_TRUNCATED_CALL = "".join(
    _anthropic_event(name, data)
    for name, data in [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 9, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me look"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"q": "ord'},
            },
        ),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 64}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
)
GEMINI_TRUNCATED_CALL = "".join(
    f"data: {json.dumps(frame)}\r\n\r\n"
    for frame in [
        {"candidates": [{"content": {"parts": [{"text": "Let me look"}], "role": "model"}, "index": 0}]},
        {
            "candidates": [
                {
                    "content": {"parts": [{"functionCall": {"name": "lookup", "args": {"q": "ord"}}}], "role": "model"},
                    "finishReason": "MAX_TOKENS",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 64, "totalTokenCount": 73},
        },
    ]
)


@pytest.fixture
async def chat(tmp_path: Path) -> AsyncIterator[Callable[[list[str]], Any]]:
    runtimes: list[Runtime] = []
    router = respx.mock(assert_all_called=False)
    router.start()

    async def make(bodies: list[str], provider: str = "scripted") -> Any:
        replies = iter(bodies)

        def reply(request: httpx.Request) -> httpx.Response:
            SENT.append(request.content.decode())
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=next(replies).encode())

        router.post(url__regex=URLS[provider]).mock(side_effect=reply)
        defs = definitions(
            tools={"lookup": define_tool(description="Look up", args=Q, execute=_lookup)},
            prompts={"p": define_prompt(prompt="You help.", tool_description="helper", tools=("lookup",))},
            agents={"chat": define_agent(type="ai_human", side_a=Side("p"))},
        )
        config = {"providers": PROVIDERS, "models": MODELS, "default_model": provider}
        storage = SQLiteStorage(str(tmp_path / "a.db"))
        runtime = Runtime(defs, config=config_from_dict(config), storage=storage, settings=RuntimeSettings())
        await runtime.open()
        runtimes.append(runtime)
        thread = await runtime.create_thread("chat")
        STORES[thread.id] = storage
        return thread

    try:
        yield make
    finally:
        for runtime in runtimes:
            await runtime.close()
        router.stop()
        RAN.clear()


@pytest.mark.parametrize(
    ("provider", "body"),
    [
        ("scripted", TRUNCATED_CALL),
        ("anthropic", ANTHROPIC_TRUNCATED_CALL),
        ("gemini", GEMINI_TRUNCATED_CALL),
    ],
)
async def test_a_tool_call_cut_by_length_is_never_run(chat, provider, body, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "anthropic-key-000000")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key-000000")
    thread = await chat([body], provider)
    result = await thread.send("find my order")
    assert RAN == []
    assert result.truncated and result.finish == "length" and result.output == "Let me look"
    stored = [m for m in (await thread.get_messages()).messages if m.role == "assistant"][-1]
    assert stored.finish == "length" and stored.tool_calls is None
    assert stored.metadata["dropped_tool_calls"][0]["name"] == "lookup"
    assert not [m for m in (await thread.get_messages()).messages if m.role == "tool"]


async def test_a_truncated_answer_is_marked_and_announced(chat):
    thread = await chat([answer({"role": "assistant", "content": "The first half of"}, finish="length")])
    result = await thread.send("tell me everything")
    assert result.truncated and result.output == "The first half of"
    truncated = [e for e in [e async for e in _replay(thread)] if e.type == "model_truncated"]
    assert len(truncated) == 1 and truncated[0].data["finish_reason"] == "length"


async def test_a_refusal_is_stored_apart_with_an_event(chat):
    thread = await chat(
        [answer({"role": "assistant", "content": None}, {"refusal": "I can't help with that."}, finish="stop")]
    )
    result = await thread.send("something bad")
    assert result.refusal == "I can't help with that." and result.finish == "refusal" and result.output is None
    stored = [m for m in (await thread.get_messages()).messages if m.role == "assistant"][-1]
    assert stored.refusal == "I can't help with that." and stored.content is None
    refused = [e for e in [e async for e in _replay(thread)] if e.type == "model_refused"]
    assert refused and refused[0].data["refusal"] == "I can't help with that."


async def test_a_content_filter_stop_is_stored_and_announced(chat):
    thread = await chat([answer({"role": "assistant", "content": "Partial"}, finish="content_filter")])
    result = await thread.send("hi")
    assert result.finish == "content_filter" and not result.truncated
    assert [e.type for e in [e async for e in _replay(thread)]].count("model_content_filtered") == 1


async def test_reasoning_is_stored_streamed_apart_and_not_sent_to_an_openai_wire(chat):
    thread = await chat(
        [
            answer(
                {"role": "assistant", "reasoning_content": "The user greets; "},
                {"reasoning_content": "greet back."},
                {"content": "Hi!"},
                finish="stop",
            ),
            answer({"role": "assistant", "content": "Bye!"}, finish="stop"),
        ]
    )
    events: list[Any] = []

    async def watch() -> None:
        async for e in thread.events():
            events.append(e)

    watcher = asyncio.create_task(watch())
    result = await thread.send("hello")
    await asyncio.sleep(0)
    watcher.cancel()
    assert result.output == "Hi!"
    stored = [m for m in (await thread.get_messages()).messages if m.role == "assistant"][-1]
    assert stored.reasoning == [{"type": "thinking", "thinking": "The user greets; greet back.", "provider": "openai"}]
    assert stored.content == "Hi!"
    assert "".join(e.data["text"] for e in events if e.type == "reasoning_delta") == "The user greets; greet back."
    assert all("greet back" not in e.data["text"] for e in events if e.type == "text_delta")
    await thread.send("bye")  # DeepSeek-style reasoning is not sent back (providers refuse it)
    assert "greet back" not in SENT[-1] and "Hi!" in SENT[-1]


async def _replay(thread: Any) -> AsyncIterator[Any]:
    for event in await STORES[thread.id].events_after(thread.id, 0):
        yield event
