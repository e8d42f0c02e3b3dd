"""The runtime-read OpenAI stream (`stream: auto`) against `litellm.acompletion` (`stream: litellm`).

Both paths must send the same request and yield the same items, and treat the
stream's edge cases alike (tests/test_stream_ends.py covers where both now differ
from LiteLLM's own wrapper: `[DONE]` as an end marker, in-band errors by status).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
import respx

from providers.client import ModelClient
from providers.config import config_from_dict
from providers.sse import openai_events, sse_event
from providers.stream import ProviderError, StreamEnd, StreamRestart, TextDelta

URL = "http://wire.invalid/v1/chat/completions"
KEY = "sk-test-wire-0123456789abcdef"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]


def client(
    stream: str, *, model: str = "gpt-4o-mini", params: dict[str, Any] | None = None, attempts: int = 1
) -> ModelClient:
    return ModelClient(
        config_from_dict(
            {
                "providers": {
                    "p": {
                        "type": "openai",
                        "api_key": "${WIRE_KEY}",
                        "base_url": "http://wire.invalid/v1",
                        "headers": {"X-Team": "bench"},
                        "stream": stream,
                    }
                },
                "models": {
                    "m": {
                        "provider": "p",
                        "model": model,
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
    monkeypatch.setenv("WIRE_KEY", KEY)


SSE_HEADERS = {"content-type": "text/event-stream"}


def sse(events: list[bytes], status: int = 200) -> httpx.Response:
    return httpx.Response(status, headers=SSE_HEADERS, content=b"".join(events))


async def run(c: ModelClient, **kwargs: Any) -> list[Any]:
    return [item async for item in c.stream("m", MESSAGES, **kwargs)]


@pytest.mark.parametrize(
    ("model", "params", "extra"),
    [
        ("gpt-4o-mini", {"temperature": 0.2, "max_tokens": 50}, {"parallel_tool_calls": True, "tool_choice": "auto"}),
        ("gpt-5-mini", {"max_tokens": 50, "reasoning_effort": "low"}, {}),  # max_tokens -> max_completion_tokens
        (
            "gpt-4o-mini",
            {"service_tier": "flex", "my_gateway_flag": True},
            {"web_search_options": {"search_context_size": "low"}},
        ),
    ],
)
async def test_both_paths_send_the_same_request(model, params, extra):
    bodies, headers = {}, {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            route = router.post(URL).mock(return_value=sse(openai_events("ok", [], model=model, usage=(1, 1))))
            await run(client(mode, model=model, params=params), tools=TOOLS, extra=extra)
        request = route.calls[0].request
        bodies[mode] = json.loads(request.content)
        headers[mode] = {k: request.headers.get(k) for k in ("authorization", "x-team", "content-type")}
    assert bodies["auto"] == bodies["litellm"]
    assert (
        headers["auto"]
        == headers["litellm"]
        == {"authorization": f"Bearer {KEY}", "x-team": "bench", "content-type": "application/json"}
    )


async def test_organization_and_project_headers_match_the_sdk(monkeypatch):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-test")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-test")
    sent = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            route = router.post(URL).mock(return_value=sse(openai_events("ok", [], model="gpt-4o-mini", usage=(1, 1))))
            await run(client(mode))
        request = route.calls[0].request
        sent[mode] = (request.headers.get("openai-organization"), request.headers.get("openai-project"))
    assert sent["auto"] == sent["litellm"] == ("org-test", "proj-test")


async def test_unsupported_param_fails_before_any_request_on_both_paths():
    for mode in ("auto", "litellm"):
        with respx.mock(assert_all_called=False) as router:
            route = router.post(URL).mock(return_value=sse(openai_events("ok", [], model="gpt-5", usage=(1, 1))))
            with pytest.raises(ProviderError, match="temperature") as info:
                await run(client(mode, model="gpt-5", params={"temperature": 0.2}))
        assert not route.called and info.value.kind == "bad_request", mode


async def test_error_event_inside_a_200_stream_is_retried():
    broken = [sse_event({"error": {"message": "upstream overloaded", "code": 503}})]
    with respx.mock() as router:
        router.post(URL).mock(
            side_effect=[sse(broken), sse(openai_events("fine", [], model="gpt-4o-mini", usage=(3, 1)))]
        )
        items = await run(client("auto", attempts=2))
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "fine"


async def test_error_event_names_the_providers_message():
    broken = [sse_event({"error": {"message": "This model's maximum context length is 8 tokens", "code": 400}})]
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse(broken))
        with pytest.raises(ProviderError, match="maximum context length") as info:
            await run(client("auto", attempts=3))
    assert info.value.kind == "context_window" and not info.value.retryable


class _DropAfter(httpx.AsyncByteStream):
    """Sends `events`, then the connection breaks."""

    def __init__(self, events: list[bytes]) -> None:
        self._events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self._events:
            yield event
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


async def test_connection_lost_after_finish_reason_keeps_the_answer():
    events = openai_events("all here", [], model="gpt-4o-mini", usage=(2, 2))[
        :-2
    ]  # finish chunk sent, usage and [DONE] lost
    with respx.mock() as router:
        route = router.post(URL).mock(return_value=httpx.Response(200, headers=SSE_HEADERS, stream=_DropAfter(events)))
        items = await run(client("auto", attempts=2))
    assert route.call_count == 1 and not [i for i in items if isinstance(i, StreamRestart)]
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "all here"
    assert isinstance(items[-1], StreamEnd) and items[-1].finish_reason == "stop"


async def test_connection_lost_before_finish_reason_restarts():
    events = openai_events("cut sho", [], model="gpt-4o-mini", usage=(2, 2))[:-3]
    with respx.mock() as router:
        router.post(URL).mock(
            side_effect=[
                httpx.Response(200, headers=SSE_HEADERS, stream=_DropAfter(events)),
                sse(openai_events("whole", [], model="gpt-4o-mini", usage=(2, 2))),
            ]
        )
        items = await run(client("auto", attempts=2))
    restart = next(i for i, item in enumerate(items) if isinstance(item, StreamRestart))
    assert "".join(i.text for i in items[restart:] if isinstance(i, TextDelta)) == "whole"


async def test_finish_reason_abort_is_a_server_error():
    aborted = [
        sse_event(
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}],
            }
        ),
        b"data: [DONE]\n\n",
    ]
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse(aborted))
        with pytest.raises(ProviderError, match="aborted") as info:
            await run(client("auto"))
    assert info.value.retryable


async def test_both_paths_yield_the_same_items():
    from providers.sse import SSECall

    calls = [SSECall("lookup", '{"q": "one"}', "call_1"), SSECall("lookup", '{"q": "two"}', "call_2")]
    items = {}
    for mode in ("auto", "litellm"):
        with respx.mock() as router:
            router.post(URL).mock(
                return_value=sse(
                    openai_events("Two lookups.", calls, model="gpt-4o-mini-2024-07-18", usage=(30, 9), chunk_size=4)
                )
            )
            items[mode] = await run(client(mode), tools=TOOLS)
    *deltas, end = items["auto"]
    assert deltas == items["litellm"][:-1] and len(deltas) > 5
    # LiteLLM reports the model asked for; the wire path the snapshot that answered.
    assert end == replace(items["litellm"][-1], model="openai/gpt-4o-mini-2024-07-18")


async def test_a_streamed_answer_leaves_no_garbage_for_the_collector():
    """httpx's streamed response and its stream refer to each other, with ~45 objects hanging from the pair;
    a long conversation carried them into the old generation, where only a full collection finds them.
    The wire reader (providers/streams/openai_wire.py) breaks the pair once the body is read."""
    import gc

    c = client("auto")
    answer = openai_events("fine", [], model="gpt-4o-mini", usage=(3, 1))
    with respx.mock() as router:
        router.post(URL).mock(side_effect=lambda request: sse(answer))
        await run(c)  # warm: LiteLLM's parameter memo and client are built once
        gc.collect()
        gc.disable()
        try:
            for _ in range(5):
                await run(c)
            found = gc.collect()
        finally:
            gc.enable()
    assert found < 20, f"{found} objects of cyclic garbage after 5 answers"
