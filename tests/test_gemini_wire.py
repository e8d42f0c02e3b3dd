"""The runtime's Gemini reader (`stream: auto`) against `litellm.acompletion` (`stream: litellm`).

Both paths must send the same bytes and, over a corpus of streams in the shape of Gemini's documented
`streamGenerateContent?alt=sse` examples (tests/fixtures/gemini/), yield the same items. Where LiteLLM's
path loses something (thoughts, code-execution parts, the raw finish reason, a cut stream) the test asserts
what ours keeps. Call ids differ by design: Gemini sends none and LiteLLM makes random ones (with the thought
signature folded in); ours are stable and the signature travels apart.
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
from providers.streams.gemini_wire import GeminiReader

URL = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
KEY = "AIza-test-wire-000000000000000"
FIXTURES = Path(__file__).parent / "fixtures" / "gemini"
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


def client(stream: str, *, params: dict[str, Any] | None = None, attempts: int = 1) -> ModelClient:
    return ModelClient(
        config_from_dict(
            {
                "providers": {
                    "gem": {
                        "type": "gemini",
                        "api_key": "${GEMINI_WIRE_KEY}",
                        "headers": {"X-Team": "bench"},
                        "stream": stream,
                    }
                },
                "models": {
                    "m": {
                        "provider": "gem",
                        "model": "gemini-2.5-flash",
                        "params": params or {},
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
    monkeypatch.setenv("GEMINI_WIRE_KEY", KEY)


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def sse(body: bytes, status: int = 200) -> httpx.Response:
    return httpx.Response(status, headers=SSE_HEADERS, content=body)


async def run(c: ModelClient, messages: list[dict[str, Any]] = MESSAGES, **kwargs: Any) -> list[Any]:
    return [item async for item in c.stream("m", messages, tools=TOOLS, **kwargs)]


async def both(body: bytes, **kwargs: Any) -> dict[str, list[Any]]:
    items = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            router.post(URL).mock(return_value=sse(body))
            items[mode] = await run(client(mode), **kwargs)
    return items


def comparable(items: list[Any]) -> list[Any]:
    """Ids and signatures are compared separately; the end's raw reason and normalized word too."""
    out = []
    for i in items:
        if isinstance(i, ToolCallDelta):
            out.append(replace(i, id=None, signature=None))
        elif isinstance(i, StreamEnd):
            out.append(replace(i, finish_reason=None, finish="stop"))
        elif not isinstance(i, (ReasoningDelta, ProviderBlock)):
            out.append(i)
    return out


# -- the request -------------------------------------------------------------

HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18 \u00b0C, caf\u00e9 weather"},
]


@pytest.mark.parametrize(
    ("params", "extra", "messages"),
    [
        ({"temperature": 0.2, "max_tokens": 100}, {"tool_choice": "auto"}, MESSAGES),
        ({"stop": ["END"], "top_p": 0.9}, {"tool_choice": "required"}, HISTORY),
        ({"reasoning_effort": "low"}, {}, MESSAGES),
        (
            {},
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "w", "schema": {"type": "object", "properties": {"t": {"type": "number"}}}},
                }
            },
            MESSAGES,
        ),
    ],
)
async def test_both_paths_send_the_same_request(params, extra, messages):
    sent = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            route = router.post(URL).mock(return_value=sse(fixture("text.sse")))
            await run(client(mode, params=params), messages, extra=extra)
        request = route.calls[0].request
        sent[mode] = (str(request.url), request.content, dict(request.headers.items()))
    assert sent["auto"] == sent["litellm"]
    assert sent["auto"][2]["x-goog-api-key"] == KEY and json.loads(sent["auto"][1])["contents"]


async def test_unsupported_param_fails_before_any_request_on_both_paths():
    for mode in ("auto", "litellm"):
        with respx.mock(assert_all_called=False) as router:
            route = router.post(URL).mock(return_value=sse(fixture("text.sse")))
            with pytest.raises(ProviderError, match="logit_bias") as info:
                await run(client(mode, params={"logit_bias": {"1": 2}}))
        assert not route.called and info.value.kind == "bad_request", mode


# -- the items ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "raw", "finish"),
    [
        ("text.sse", "STOP", "stop"),
        ("parallel_tools.sse", "STOP", "tool_calls"),
        ("no_argument_tool.sse", "STOP", "tool_calls"),
        ("progress_escapes.sse", "STOP", "tool_calls"),
        ("thinking.sse", "STOP", "stop"),
        ("max_tokens.sse", "MAX_TOKENS", "length"),
        ("safety.sse", "SAFETY", "content_filter"),
        ("prompt_blocked.sse", "PROHIBITED_CONTENT", "content_filter"),
        ("code_execution.sse", "STOP", "stop"),
    ],
)
async def test_both_paths_yield_the_same_items(name, raw, finish):
    items = await both(fixture(name))
    assert comparable(items["auto"]) == comparable(items["litellm"])
    end = items["auto"][-1]
    assert (end.finish_reason, end.finish) == (raw, finish)


def calls(items: list[Any]) -> list[tuple[str | None, str | None, Any, str | None]]:
    return [(i.id, i.name, json.loads(i.arguments), i.signature) for i in items if isinstance(i, ToolCallDelta)]


async def test_parallel_calls_keep_their_signature_apart_from_a_stable_id():
    first, again = (
        (await both(fixture("parallel_tools.sse")))["auto"],
        (await both(fixture("parallel_tools.sse")))["auto"],
    )
    assert [(name, args, sig) for _, name, args, sig in calls(first)] == [
        ("get_weather", {"location": "Paris"}, "CiQBVKhc7oMsig-signature-one"),
        ("get_weather", {"location": "Tokyo"}, None),
    ]
    ids = [i for i, *_ in calls(first)]
    assert ids == [i for i, *_ in calls(again)] and len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    assert [d.index for d in first if isinstance(d, ToolCallDelta)] == [0, 1]


async def test_the_providers_own_call_id_is_kept():
    body = fixture("no_argument_tool.sse").replace(b'"name": "get_time"', b'"id": "fc_01", "name": "get_time"')
    items = (await both(body))["auto"]
    assert calls(items) == [("fc_01", "get_time", {}, None)]


async def test_no_argument_call_and_escapes_survive():
    no_args = (await both(fixture("no_argument_tool.sse")))["auto"]
    escapes = (await both(fixture("progress_escapes.sse")))["auto"]
    assert [c[1:3] for c in calls(no_args)] == [("get_time", {})]
    assert [c[1:3] for c in calls(escapes)] == [
        (
            "report_progress",
            {"message": 'Caf\u00e9 "quoted" \\ backslash\nnew line, \u65e5\u672c\u8a9e, \U0001f600 done', "step": 2},
        )
    ]


async def test_thoughts_and_signatures_are_kept():
    """LiteLLM's path yields no reasoning; ours keeps the thought text and the signature of the text part."""
    items = await both(fixture("thinking.sse"))
    reasoning = [i for i in items["auto"] if isinstance(i, ReasoningDelta)]
    assert reasoning[0].text.startswith("**Working out the GCD**") and reasoning[0].signature is None
    assert [r.signature for r in reasoning if r.signature] == ["EtgDCtUDAdHtim9-text-signature"]
    assert "".join(i.text for i in items["auto"] if isinstance(i, TextDelta)) == "The greatest common divisor is 21."
    assert [i.text for i in items["litellm"] if isinstance(i, ReasoningDelta)][:1] == [reasoning[0].text]  # tap
    assert (items["auto"][-1].usage.output_tokens, items["litellm"][-1].usage.output_tokens) == (
        48,
        48,
    )  # thoughts are billed


async def test_code_execution_parts_are_kept_verbatim_in_order():
    items = (await both(fixture("code_execution.sse")))["auto"]
    kinds = [type(i).__name__ for i in items]
    assert kinds == ["ProviderBlock", "ProviderBlock", "TextDelta", "StreamEnd"]
    assert items[0].block == {"executableCode": {"language": "PYTHON", "code": "print(2 + 2)"}}


def test_finish_reasons_map_to_the_neutral_word():
    words = {}
    for reason in (
        "STOP",
        "MAX_TOKENS",
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "MALFORMED_FUNCTION_CALL",
        "NEW_ONE",
    ):
        reader = GeminiReader()
        reader.feed({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}]})
        words[reason] = reader.end().finish
    assert words == {
        "STOP": "stop",
        "MAX_TOKENS": "length",
        "SAFETY": "content_filter",
        "RECITATION": "content_filter",
        "BLOCKLIST": "content_filter",
        "PROHIBITED_CONTENT": "content_filter",
        "SPII": "content_filter",
        "MALFORMED_FUNCTION_CALL": "error",
        "NEW_ONE": "error",
    }


@pytest.mark.parametrize(
    ("raw", "finish"),
    [
        ("IMAGE_PROHIBITED_CONTENT", "content_filter"),
        ("IMAGE_RECITATION", "content_filter"),
        ("IMAGE_OTHER", "content_filter"),
        ("NO_IMAGE", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "error"),
        ("TOO_MANY_TOOL_CALLS", "error"),
        ("A_REASON_ADDED_LATER", "error"),
    ],
)
async def test_both_paths_end_a_gemini_answer_with_the_same_finish(raw, finish):
    """One finish table (providers/finish.py) for the native reader and LiteLLM's path: the image
    filters and `NO_IMAGE` were `error` on one and `content_filter` on the other, an unknown reason
    `error` on one and `stop` on the other."""
    body = fixture("text.sse").replace(b'"finishReason": "STOP"', f'"finishReason": "{raw}"'.encode())
    items = await both(body)
    assert {mode: (i[-1].finish_reason, i[-1].finish) for mode, i in items.items()} == {
        "auto": (raw, finish),
        "litellm": (raw, finish),
    }


@pytest.mark.parametrize(
    "reason", ["PROHIBITED_CONTENT", "OTHER", "BLOCKED_REASON_UNSPECIFIED", "A_REASON_ADDED_LATER"]
)
async def test_a_blocked_prompt_is_a_content_filter_on_both_paths_whatever_its_reason(reason):
    body = fixture("prompt_blocked.sse").replace(b'"PROHIBITED_CONTENT"', f'"{reason}"'.encode())
    items = await both(body)
    assert {mode: (i[-1].finish_reason, i[-1].finish) for mode, i in items.items()} == {
        "auto": (reason, "content_filter"),
        "litellm": (reason, "content_filter"),
    }


# -- how a stream ends -------------------------------------------------------


def _cut_between_events() -> bytes:
    body = fixture("text.sse")
    return body[: body.rindex(b"data:")]


def _cut_mid_event() -> bytes:
    body = fixture("text.sse")
    return body[: body.rindex(b"data:") + 60]


@pytest.mark.parametrize(
    "body", [_cut_between_events(), _cut_mid_event(), b""], ids=["between-events", "mid-event", "empty"]
)
async def test_a_cut_stream_is_retried_then_an_error(body):
    """LiteLLM reports `finish_reason: stop` on every Gemini chunk, so on its path a cut answer looks finished."""
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=[sse(body), sse(fixture("text.sse"))])
        items = await run(client("auto", attempts=2))
    assert route.call_count == 2 and items[-1].attempts == 2
    assert any(isinstance(i, StreamRestart) for i in items) == bool(body)
    restart = max((n for n, i in enumerate(items) if isinstance(i, StreamRestart)), default=-1)
    assert "".join(i.text for i in items[restart + 1 :] if isinstance(i, TextDelta)).startswith("The sky appears blue")
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse(body))
        with pytest.raises(ProviderError) as info:
            await run(client("auto"))
    assert info.value.retryable and info.value.kind == "connection"


class _DropAfter(httpx.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._body
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


async def test_connection_lost_after_the_finish_reason_keeps_the_answer():
    with respx.mock() as router:
        route = router.post(URL).mock(
            return_value=httpx.Response(200, headers=SSE_HEADERS, stream=_DropAfter(fixture("text.sse")))
        )
        items = await run(client("auto", attempts=2))
    assert route.call_count == 1 and items[-1].finish == "stop"


async def test_a_blocked_prompt_is_an_answer_not_a_cut():
    items = (await both(fixture("prompt_blocked.sse")))["auto"]
    assert items == [replace(items[-1])] and items[-1].finish == "content_filter"


async def test_error_chunk_is_raised_by_its_status_and_retried():
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=[sse(fixture("error.sse")), sse(fixture("text.sse"))])
        items = await run(client("auto", attempts=2))
    assert route.call_count == 2 and items[-1].attempts == 2
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse(fixture("error.sse")))
        with pytest.raises(ProviderError, match="RESOURCE_EXHAUSTED") as info:
            await run(client("auto"))
    assert info.value.kind == "rate_limit" and info.value.status == 429


async def test_http_errors_map_like_litellms():
    body = {"error": {"code": 400, "message": "Invalid JSON payload received.", "status": "INVALID_ARGUMENT"}}
    kinds = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            route = router.post(URL).mock(return_value=httpx.Response(400, json=body))
            with pytest.raises(ProviderError, match="Invalid JSON payload") as info:
                await run(client(mode, attempts=2))
        kinds[mode] = (info.value.kind, info.value.status, info.value.retryable, route.call_count)
    assert kinds["auto"] == kinds["litellm"] == ("bad_request", 400, False, 1)


async def test_the_key_never_appears_in_an_error():
    with respx.mock() as router:
        router.post(URL).mock(
            return_value=httpx.Response(
                403, json={"error": {"code": 403, "message": f"API key {KEY} not valid", "status": "PERMISSION_DENIED"}}
            )
        )
        with pytest.raises(ProviderError) as info:
            await run(client("auto"))
    assert KEY not in str(info.value)


async def test_the_callers_messages_are_left_as_they_were():
    """LiteLLM's transform takes the system message out of the list it is given: the reader hands it a copy."""
    messages = json.loads(json.dumps(HISTORY))
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse(fixture("text.sse")))
        await run(client("auto"), messages)
    assert messages == HISTORY


async def test_an_eval_runs_seed_reaches_gemini_as_generation_config_seed_on_both_paths():
    from providers.client import seeded

    for mode in ("auto", "litellm"):
        with respx.mock() as router, seeded(11):
            route = router.post(URL).mock(return_value=sse(fixture("text.sse")))
            await run(client(mode))
        assert json.loads(route.calls[0].request.content)["generationConfig"]["seed"] == 11, mode
