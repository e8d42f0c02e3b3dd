"""Attack: what a model sends is input too (issue 43, item 5).

- Deep tool arguments: ~1,000 levels of brackets (2 KB) raised `RecursionError` in the argument
  parse (only `JSONDecodeError` was caught); the step broke, the thread stayed `running`, and every
  resume broke again. Now the call gets an error result naming the limit, and the thread goes on.
- A flooding answer, and one that drips forever: see below.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
import respx
from support import Q, chat_definitions

from orchestrator import define_tool
from orchestrator.core.execution_result import ExecutionFailed
from orchestrator.engine.streaming import StreamAssembler
from orchestrator.testing.checks import calls_made
from providers.client import ModelClient
from providers.config import config_from_dict
from providers.model_json import MAX_DEPTH
from providers.scripted import ScriptedCall, ScriptedResponse
from providers.sse import sse_event
from providers.stream import ProviderError, ReasoningDelta, StreamEnd, TextDelta, ToolCallDelta

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-model-input-0123456789", "GEMINI_API_KEY": "AIza-model-input-0123456789abcdef"}


def wire_config(wire: str, **model: Any) -> dict[str, Any]:
    """One model alias `m` on `wire`, served by a ScriptedModel of that wire; `model` adds settings."""
    provider = {
        "openai": {"type": "scripted"},
        "anthropic": {"type": "anthropic", "api_key": "${ANTHROPIC_API_KEY}"},
        "gemini": {"type": "gemini", "api_key": "${GEMINI_API_KEY}"},
    }[wire]
    name = {"openai": "demo", "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}[wire]
    entry = {"provider": "p", "model": name, "retry": {"attempts": 1}, "params": {"max_tokens": 256}, **model}
    return {"providers": {"p": provider}, "models": {"m": entry}, "default_model": "m"}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def _nested(depth: int) -> str:
    return '{"q": "x", "extra": ' + "[" * depth + "]" * depth + "}"


def _tool(ran: list[str]) -> Any:
    async def run(state: Any, args: Q) -> dict[str, str]:
        ran.append(args.q)
        return {"status": "success", "result": "ok"}

    return define_tool(description="Look up", args=Q, execute=run)


WIRES_AND_DEPTHS = [
    ("openai", MAX_DEPTH + 1),
    ("openai", 1_000),
    ("openai", 50_000),
    ("anthropic", 1_000),
    ("gemini", 200),  # Gemini sends the arguments as JSON inside its chunk: parseable, and past the limit
]


@pytest.mark.parametrize(("wire", "depth"), WIRES_AND_DEPTHS)
async def test_deep_tool_arguments_are_an_error_result_and_the_thread_goes_on(
    make_runtime: Any, wire: str, depth: int
) -> None:
    ran: list[str] = []
    defs = chat_definitions({"lookup": _tool(ran)}, ("lookup",))
    script = [
        ScriptedResponse(tool_calls=[ScriptedCall("lookup", _nested(depth))], chunk_size=4096),
        ScriptedResponse(text="sorry, flatter next time"),
        ScriptedResponse(text="still here"),
    ]
    rt, model = await make_runtime(defs, script, config=wire_config(wire), wire=wire)
    thread = await rt.create_thread("chat")
    result = await thread.send("go")
    assert result.output == "sorry, flatter next time"
    assert ran == []
    messages = (await thread.get_messages(include_silent=True)).messages
    [error] = [m for m in messages if m.role == "tool"]
    assert error.tool_status == "error"
    assert f"deeper than {MAX_DEPTH} levels" in (error.content or "") and "'lookup'" in (error.content or "")
    assert f"deeper than {MAX_DEPTH} levels" in str(model.requests[1])  # the model read why
    assert (await rt.storage.get_thread(thread.id)).status != "running"
    assert len(await calls_made(thread)) == 1  # the eval checks read the stored call too
    assert (await thread.send("again")).output == "still here"


async def test_arguments_at_the_limit_still_run(make_runtime: Any) -> None:
    ran: list[str] = []
    defs = chat_definitions({"lookup": _tool(ran)}, ("lookup",))
    at_limit = '{"q": "x", "extra": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    script = [ScriptedResponse(tool_calls=[ScriptedCall("lookup", at_limit)]), ScriptedResponse(text="done")]
    rt, _ = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    await thread.send("go")
    assert ran == ["x"]


# -- a stream that floods, or drips forever ------------------------------------------------------
#
# A flood (text, tool arguments or reasoning, in events or in one line that never ends) read on with
# no cap: host RSS 3.2 GB in 24 s and growing. A drip (a chunk just inside the model's `timeout`,
# forever) was never cut: only the gap between chunks was bounded. Both now end the answer with a
# provider error, on every stream path; the streams below stop by themselves after EVENTS events
# so that the unfixed code ends too (cut, or finished), which the assertions tell apart.

CAP = 32 * 1024
PIECE = "x" * 1024
EVENTS = 3_000
OPENAI_URL = "https://vendor.test/v1/chat/completions"
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
GEMINI_URL = r"^https://generativelanguage\.googleapis\.com/v1(beta)?/models/[^/:]+:streamGenerateContent"
STREAM_PATHS = [(w, s) for w in ("openai", "anthropic", "gemini") for s in ("auto", "litellm")]


def stream_client(wire: str, stream: str, *, attempts: int = 1, **model: Any) -> ModelClient:
    provider = {
        "openai": {"type": "openai", "base_url": "https://vendor.test/v1", "api_key": "${VENDOR_KEY}"},
        "anthropic": {"type": "anthropic", "api_key": "${ANTHROPIC_API_KEY}"},
        "gemini": {"type": "gemini", "api_key": "${GEMINI_API_KEY}"},
    }[wire]
    name = {"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}[wire]
    entry = {"provider": "p", "model": name, "retry": {"attempts": attempts, "backoff": 0}, **model}
    entry.setdefault("params", {"max_tokens": 256})
    config = config_from_dict({"providers": {"p": {**provider, "stream": stream}}, "models": {"m": entry}})
    return ModelClient(config, sleep=_no_sleep)


async def _no_sleep(_: float) -> None:
    return None


def _openai(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return sse_event({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]})


def _anthropic(data: dict[str, Any]) -> bytes:
    return sse_event(data, data["type"])


def _anthropic_head(block: dict[str, Any]) -> list[bytes]:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m"}
    start = {"type": "message_start", "message": {**message, "usage": {"input_tokens": 3, "output_tokens": 1}}}
    return [_anthropic(start), _anthropic({"type": "content_block_start", "index": 0, "content_block": block})]


def _gemini(part: dict[str, Any], finish: str | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return sse_event({"candidates": [candidate], "modelVersion": "gemini-2.5-flash"})


def _anthropic_tail() -> list[bytes]:
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}
    return [
        _anthropic({"type": "content_block_stop", "index": 0}),
        _anthropic(delta),
        _anthropic({"type": "message_stop"}),
    ]


def _piece(i: int) -> str:
    """1 KiB, different each time (LiteLLM's wrapper stops a stream repeating one chunk 100 times)."""
    return f"{i:08d}" + "x" * (len(PIECE) - 8)


def flood(wire: str, kind: str) -> tuple[list[bytes], Callable[[int], bytes], list[bytes]]:
    """(what comes first, the i-th event repeated, the end) of a stream flooding with `kind`."""
    if wire == "openai":
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ""}}
        head = [_openai({"role": "assistant", "content": ""})]
        if kind == "arguments":
            head.append(_openai({"tool_calls": [call]}))
        key = {"text": "content", "reasoning": "reasoning_content"}.get(kind)

        def openai(i: int) -> bytes:
            if key is None:
                return _openai({"tool_calls": [{"index": 0, "function": {"arguments": _piece(i)}}]})
            return _openai({key: _piece(i)})

        return head, openai, [_openai({}, "stop"), sse_event("[DONE]")]
    if wire == "anthropic":
        block, delta_type, key = {
            "text": ({"type": "text", "text": ""}, "text_delta", "text"),
            "arguments": (
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
                "input_json_delta",
                "partial_json",
            ),
            "reasoning": ({"type": "thinking", "thinking": ""}, "thinking_delta", "thinking"),
        }[kind]

        def anthropic(i: int) -> bytes:
            delta = {"type": delta_type, key: _piece(i)}
            return _anthropic({"type": "content_block_delta", "index": 0, "delta": delta})

        return _anthropic_head(block), anthropic, _anthropic_tail()

    def gemini(i: int) -> bytes:
        if kind == "arguments":
            return _gemini({"functionCall": {"name": "lookup", "args": {"q": _piece(i)}}})
        return _gemini({"text": _piece(i), **({"thought": True} if kind == "reasoning" else {})})

    return [], gemini, [_gemini({"text": "."}, "STOP")]


class Served(httpx.AsyncByteStream):
    """`head`, then `event(i)` for i < `times` (each after `before_each()`), then `tail`; counts what it sent."""

    def __init__(
        self,
        head: list[bytes],
        event: Callable[[int], bytes],
        tail: list[bytes],
        times: int,
        before_each: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.head, self.event, self.tail, self.times = head, event, tail, times
        self.before_each = before_each
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.head:
            yield event
        for i in range(self.times):
            if self.before_each is not None:
                await self.before_each()
            self.sent += 1
            yield self.event(i)
        for event in self.tail:
            yield event


def serve(router: respx.MockRouter, wire: str, streams: list[Served]) -> respx.Route:
    route = (
        router.post(url__regex=GEMINI_URL)
        if wire == "gemini"
        else router.post(OPENAI_URL if wire == "openai" else ANTHROPIC_URL)
    )
    answers = iter(streams)
    return route.mock(
        side_effect=lambda _: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=next(answers))
    )


async def consume(client: ModelClient) -> list[Any]:
    return [item async for item in client.stream("m", [{"role": "user", "content": "hi"}], tools=TOOLS)]


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


@pytest.fixture
def vendor_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VENDOR_KEY", "vendor-key-model-input-000")


@pytest.mark.parametrize("kind", ["text", "arguments", "reasoning"])
@pytest.mark.parametrize(("wire", "stream"), STREAM_PATHS)
async def test_a_flooding_answer_is_cut_at_max_answer_bytes(
    vendor_key: None, wire: str, stream: str, kind: str
) -> None:
    served = Served(*flood(wire, kind), times=EVENTS)
    client = stream_client(wire, stream, max_answer_bytes=CAP)
    with respx.mock() as router:
        serve(router, wire, [served])
        with pytest.raises(ProviderError) as err:
            await consume(client)
    assert err.value.kind == "too_large" and not err.value.retryable, err.value
    assert "max_answer_bytes" in str(err.value) and str(CAP) in str(err.value)
    assert served.sent < 3 * CAP // len(PIECE), served.sent  # stopped reading near the cap, not at the end


class Unending(httpx.AsyncByteStream):
    """One SSE line that never ends: `data: {"...` then 64 KiB of `x` per read, up to `reads`."""

    def __init__(self, reads: int) -> None:
        self.reads, self.sent = reads, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'data: {"x": "'
        for _ in range(self.reads):
            self.sent += 1
            yield b"x" * 65536


@pytest.mark.parametrize("wire", ["openai", "anthropic", "gemini"])
async def test_one_sse_event_that_never_ends_is_refused_before_it_fills_memory(vendor_key: None, wire: str) -> None:
    body = Unending(reads=1024)  # 64 MiB unless refused
    client = stream_client(wire, "auto", max_answer_bytes=CAP)
    with respx.mock() as router:
        serve(router, wire, [body])  # type: ignore[list-item]
        with pytest.raises(ProviderError) as err:
            await consume(client)
    assert err.value.kind == "too_large", err.value
    assert body.sent <= 4, body.sent


async def test_an_answer_within_the_cap_is_untouched(vendor_key: None) -> None:
    head, event, tail = flood("openai", "text")
    client = stream_client("openai", "auto", max_answer_bytes=CAP)
    with respx.mock() as router:
        serve(router, "openai", [Served(head, event, tail, times=CAP // len(PIECE) - 1)])
        items = await consume(client)
    assert isinstance(items[-1], StreamEnd)


async def test_a_flood_ends_the_execution_and_the_thread_goes_on(make_runtime: Any) -> None:
    defs = chat_definitions({"lookup": _tool([])}, ("lookup",))
    script = [ScriptedResponse(text="y" * (4 * CAP), chunk_size=1024), ScriptedResponse(text="short")]
    config = {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {
            "demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}, "max_answer_bytes": CAP}
        },
        "default_model": "demo",
    }
    rt, _ = await make_runtime(defs, script, config=config)
    thread = await rt.create_thread("chat")
    with pytest.raises(ExecutionFailed) as failed:
        await thread.send("go")
    assert "max_answer_bytes" in str(failed.value)
    assert (await rt.storage.get_thread(thread.id)).status == "failed"
    messages = (await thread.get_messages(include_silent=True)).messages
    assert not any(m.role == "assistant" and m.content for m in messages)  # nothing of the flood was stored
    assert (await thread.send("again")).output == "short"


class _ClockLoop(asyncio.SelectorEventLoop):
    """Time passes only when the stream below moves it (as in tests/test_deadline.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now


def drip(gap: float) -> Callable[[], Awaitable[None]]:
    async def before_each() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, _ClockLoop)
        loop.now += gap  # the provider took `gap` seconds for this chunk
        await asyncio.sleep(0)

    return before_each


@pytest.mark.parametrize(("wire", "stream"), STREAM_PATHS)
def test_a_stream_that_drips_forever_ends_at_total_timeout(vendor_key: None, wire: str, stream: str) -> None:
    """A chunk every 0.9 s, 1 s apart at most: the gaps never time out; the total (10 s) does, on each attempt."""
    answers = [Served(*flood(wire, "text"), times=EVENTS, before_each=drip(0.9)) for _ in range(2)]
    client = stream_client(wire, stream, attempts=2, timeout=1.0, total_timeout=10.0, max_answer_bytes=10 * CAP)

    async def main() -> tuple[ProviderError | None, float]:
        with respx.mock() as router:
            route = serve(router, wire, answers)
            try:
                await consume(client)
            except ProviderError as exc:
                assert route.call_count == 2  # a timeout is retried, as the gap's is
                return exc, asyncio.get_running_loop().time()
        return None, asyncio.get_running_loop().time()

    with asyncio.Runner(loop_factory=_ClockLoop) as runner:
        error, now = runner.run(main())
    assert error is not None and error.kind == "timeout", f"the drip was read to its end ({now:g} s)"
    assert "total_timeout" in str(error) and "10 s" in str(error)
    assert all(11 <= a.sent <= 12 for a in answers), [a.sent for a in answers]  # 0.9 s each: the 12th passes 10 s
    assert now < 25


# -- what the assembler holds of a long answer ----------------------------------------------------


def _deltas(n: int) -> Iterator[str]:
    """`n` distinct 2-byte strings, made one at a time (as a stream hands them over)."""
    for i in range(n):
        yield chr(65 + i % 26) + chr(65 + (i // 26) % 26)


@pytest.mark.parametrize("kind", ["text", "arguments", "reasoning"])
def test_an_answer_in_small_deltas_is_held_near_its_own_size(kind: str) -> None:
    """Each delta was kept as its own `str` (51 bytes for 2 of text) until the answer was read."""
    make = {
        "text": TextDelta,
        "reasoning": ReasoningDelta,
        "arguments": lambda text: ToolCallDelta(0, "call_1", "lookup", text),
    }[kind]
    assembler = StreamAssembler(lambda _: None)
    n = 200_000
    tracemalloc.start()
    try:
        for text in _deltas(n):
            assembler.feed(make(text))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 4 * 2 * n, f"{held} bytes held for {2 * n} bytes of {kind}"


def test_a_long_reasoning_is_assembled_in_linear_time() -> None:
    """Each thinking delta was added with `+=` to the string in its block: a copy of all of it per delta."""
    assembler = StreamAssembler(lambda _: None)
    started = time.perf_counter()
    for text in _deltas(500_000):  # 1 MB of reasoning; quadratic, this took about 30 s
        assembler.feed(ReasoningDelta(text * 4))
    assert len(assembler.reasoning[0]["thinking"]) == 4_000_000
    assert time.perf_counter() - started < 8
