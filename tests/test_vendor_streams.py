"""The recorded corpus (tests/fixtures/streams/) against each vendor's official SDK (#23).

Every stream is served over respx and read twice: by `ModelClient.stream` on each stream
path (`auto`: the runtime's own reader where one exists; `litellm`: `litellm.acompletion`'s
wrapper with the raw-event tap), and by the vendor's SDK on the same bytes:

- OpenAI-compatible: the `openai` client's own stream (on an httpx client respx serves), accumulated by
  `openai.lib.streaming.chat.ChatCompletionStreamState`;
- Anthropic: `anthropic.lib.streaming._messages.accumulate_event`, the accumulation
  `messages.stream()` runs (its client sends on `httpx2`, which respx does not serve);
- Gemini: each event parsed by `google.genai.types.GenerateContentResponse`.

Text, reasoning, refusal, tool calls (id, name, arguments, signature), provider blocks,
the raw finish reason and usage must agree. Where the SDK cannot read a stream (no
`index` on tool calls) the expected result is written out and says why.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
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
    RefusalDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
)

STREAMS = Path(__file__).parent / "fixtures" / "streams"
PATHS = ["auto", "litellm"]
VENDOR_URL = "https://vendor.test/v1"
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
GEMINI_URL = r"https://generativelanguage\.googleapis\.com/v1beta/models/gemini-2\.5-flash:streamGenerateContent.*"
TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("get_weather", "get_time")
]


@dataclass
class Answer:
    """What a reader made of one stream, in one shape for every reader."""

    text: str = ""
    reasoning: str = ""
    signatures: list[str] = field(default_factory=list)
    refusal: str = ""
    calls: list[tuple[str | None, str | None, Any, str | None]] = field(
        default_factory=list
    )  # id, name, args, signature
    blocks: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None
    error_status: int | None = None


def serve(body: bytes, url: str) -> respx.MockRouter:
    router = respx.mock(assert_all_called=False)
    ok = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    router.post(url__regex=url).mock(side_effect=lambda _: ok)
    return router


def client(path: str, monkeypatch: pytest.MonkeyPatch) -> ModelClient:
    for name in ("VENDOR_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, f"{name.lower()}-000000")
    return ModelClient(
        config_from_dict(
            {
                "providers": {
                    "vendor": {"type": "openai", "base_url": VENDOR_URL, "api_key": "${VENDOR_KEY}", "stream": path},
                    "anthropic": {"api_key": "${ANTHROPIC_API_KEY}", "stream": path},
                    "gemini": {"api_key": "${GEMINI_API_KEY}", "stream": path},
                },
                "models": {
                    "vendor": {"provider": "vendor", "model": "m", "retry": {"attempts": 1}},
                    "claude": {
                        "provider": "anthropic",
                        "model": "claude-sonnet-4-5",
                        "params": {"max_tokens": 1024},
                        "retry": {"attempts": 1},
                    },
                    "gem": {"provider": "gemini", "model": "gemini-2.5-flash", "retry": {"attempts": 1}},
                },
            }
        )
    )


async def ours(path: str, monkeypatch: pytest.MonkeyPatch, alias: str, body: bytes, url: str) -> Answer:
    answer, calls = Answer(), {}
    try:
        with serve(body, url):
            items = [
                i
                async for i in client(path, monkeypatch).stream(alias, [{"role": "user", "content": "hi"}], tools=TOOLS)
            ]
    except ProviderError as exc:
        return Answer(error_status=exc.status)
    for item in items:
        if isinstance(item, TextDelta):
            answer.text += item.text
        elif isinstance(item, ReasoningDelta):
            answer.reasoning += item.text
            answer.signatures += [item.signature] if item.signature else []
        elif isinstance(item, RefusalDelta):
            answer.refusal += item.text
        elif isinstance(item, ToolCallDelta):
            call = calls.setdefault(item.index, [None, None, "", None])
            call[0], call[1], call[3] = call[0] or item.id, call[1] or item.name, call[3] or item.signature
            call[2] += item.arguments
        elif isinstance(item, ProviderBlock):
            answer.blocks.append(item.block)
        elif isinstance(item, StreamEnd):
            answer.finish_reason, answer.usage = item.finish_reason, (item.usage.input_tokens, item.usage.output_tokens)
    answer.calls = [(c[0], c[1], json.loads(c[2] or "{}"), c[3]) for _, c in sorted(calls.items())]
    return answer


# -- the SDKs -----------------------------------------------------------------------------


async def openai_sdk(body: bytes) -> Answer:
    import openai
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state = ChatCompletionStreamState()
    sdk = openai.AsyncOpenAI(base_url=VENDOR_URL, api_key="sdk-key", max_retries=0, http_client=httpx.AsyncClient())
    try:
        with serve(body, f"{VENDOR_URL}/chat/completions"):
            stream = await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            async for chunk in stream:
                state.handle_chunk(chunk)
    except openai.APIError as exc:
        body_status = (
            (exc.body or {}).get("status_code") or (exc.body or {}).get("code") if isinstance(exc.body, dict) else None
        )
        return Answer(error_status=body_status if isinstance(body_status, int) else None)
    snapshot = state.current_completion_snapshot
    choice = snapshot.choices[0] if snapshot.choices else None
    message = choice.message if choice else None
    extra = (message.model_extra or {}) if message else {}
    usage = snapshot.usage
    return Answer(
        text=(message.content or "") if message else "",
        reasoning=extra.get("reasoning_content") or "",
        refusal=(message.refusal or "") if message else "",
        calls=[
            (c.id, c.function.name, json.loads(c.function.arguments or "{}"), None) for c in (message.tool_calls or [])
        ]
        if message
        else [],
        finish_reason=choice.finish_reason if choice else None,
        usage=(usage.prompt_tokens, usage.completion_tokens) if usage else None,
    )


async def anthropic_sdk(body: bytes) -> Answer:
    """The SDK's own accumulation (`accumulate_event`, what `messages.stream()` runs) of each event.
    The SDK's client sends on `httpx2`, which respx does not serve, so the events are handed to it."""
    from anthropic._models import construct_type
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import RawMessageStreamEvent

    final: Any = None
    json_bufs: dict[int, bytes] = {}
    for event in body.decode().split("\n\n"):
        data = next((line[6:] for line in event.splitlines() if line.startswith("data: ")), None)
        if data is None:
            continue
        parsed = construct_type(type_=RawMessageStreamEvent, value=json.loads(data))
        if getattr(parsed, "type", None) in ("ping", None):
            continue
        final = accumulate_event(event=parsed, current_snapshot=final, json_bufs=json_bufs)
    answer = Answer(finish_reason=final.stop_reason, usage=(final.usage.input_tokens, final.usage.output_tokens))
    for block in final.content:
        data = block.model_dump(exclude_none=True)
        if block.type == "text":
            answer.text += block.text
        elif block.type == "thinking":
            answer.reasoning += block.thinking
            answer.signatures.append(block.signature)
        elif block.type == "tool_use":
            answer.calls.append((block.id, block.name, block.input, None))
        else:
            answer.blocks.append(data)
    return answer


def gemini_sdk(body: bytes) -> Answer:
    from google.genai import types

    answer, last = Answer(), None
    for line in body.decode().split("\r\n\r\n"):
        if not line.startswith("data: "):
            continue
        last = types.GenerateContentResponse.model_validate(json.loads(line[6:]))
        candidate = last.candidates[0]
        for part in candidate.content.parts if candidate.content else []:
            if part.text and part.thought:
                answer.reasoning += part.text
            elif part.text:
                answer.text += part.text
            if part.function_call:
                signature = base64.b64encode(part.thought_signature).decode() if part.thought_signature else None
                call = part.function_call
                answer.calls.append((call.id, call.name, call.args, signature))
        if candidate.finish_reason:
            answer.finish_reason = candidate.finish_reason.value
    meta = last.usage_metadata if last else None
    if meta and meta.candidates_token_count is not None:
        answer.usage = (meta.prompt_token_count, meta.candidates_token_count + (meta.thoughts_token_count or 0))
    return answer


# -- the corpus ---------------------------------------------------------------------------

OPENAI_WIRE = [
    "openai_text.sse",
    "openai_tool_call.sse",
    "openai_length.sse",
    "snowflake_cortex_no_finish_reason.sse",
    "deepseek_reasoning.sse",
    "groq_tool_use_failed.sse",
    "openrouter_inband_400.sse",
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", OPENAI_WIRE)
async def test_openai_compatible_streams_agree_with_the_openai_sdk(name, path, monkeypatch):
    body = (STREAMS / name).read_bytes()
    expected = await openai_sdk(body)
    got = await ours(path, monkeypatch, "vendor", body, f"{VENDOR_URL}/chat/completions")
    if expected.error_status is not None:
        assert got.error_status == expected.error_status == 400  # an in-band 400: a bad request, as over HTTP
        return
    assert got == expected


@pytest.mark.parametrize("path", PATHS)
async def test_parallel_calls_without_index_are_two_calls(path, monkeypatch):
    """The openai SDK cannot read this stream (its chunk model requires `index`); the answer a
    person reads from the bytes is two calls."""
    body = (STREAMS / "openai_compatible_parallel_no_index.sse").read_bytes()
    got = await ours(path, monkeypatch, "vendor", body, f"{VENDOR_URL}/chat/completions")
    assert got.calls == [
        ("call_w1", "get_weather", {"city": "Paris"}, None),
        ("call_t2", "get_time", {"tz": "CET"}, None),
    ]
    assert got.finish_reason == "tool_calls" and got.usage == (30, 24)


ANTHROPIC = [
    "anthropic_tool_use.sse",
    "anthropic_server_tool_use.sse",
    "anthropic_refusal.sse",
    "anthropic_thinking.sse",
    "anthropic_mcp_connector.sse",
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", ANTHROPIC)
async def test_anthropic_streams_agree_with_the_anthropic_sdk(name, path, monkeypatch):
    body = (STREAMS / name).read_bytes()
    expected = await anthropic_sdk(body)
    got = await ours(path, monkeypatch, "claude", body, ANTHROPIC_URL)
    assert (got.text, got.reasoning, got.signatures, got.finish_reason, got.usage) == (
        expected.text,
        expected.reasoning,
        expected.signatures,
        expected.finish_reason,
        expected.usage,
    )
    assert got.calls == expected.calls
    assert [_subset(b, e) for b, e in zip(got.blocks, expected.blocks, strict=True)] == expected.blocks


def _subset(ours_block: dict[str, Any], sdk_block: dict[str, Any]) -> dict[str, Any]:
    """Our verbatim block, on the keys the SDK's model has (the SDK adds defaults such as `caller`)."""
    return {k: ours_block.get(k, sdk_block[k]) for k in sdk_block}


GEMINI = ["gemini_function_calls_thought_signature.sse", "gemini_max_tokens.sse"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", GEMINI)
async def test_gemini_streams_agree_with_the_genai_sdk(name, path, monkeypatch):
    body = (STREAMS / name).read_bytes()
    expected = gemini_sdk(body)
    got = await ours(path, monkeypatch, "gem", body, GEMINI_URL)
    assert (got.text, got.reasoning, got.finish_reason, got.usage) == (
        expected.text,
        expected.reasoning,
        expected.finish_reason,
        expected.usage,
    )
    assert got.calls == expected.calls
