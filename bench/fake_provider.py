"""A fake model provider on loopback, in its own process, for the benchmark.

It speaks OpenAI Chat Completions (`POST /v1/chat/completions`), Anthropic
Messages (`POST /v1/messages`) and Gemini
(`POST /models/<model>:streamGenerateContent?alt=sse`), streaming the exact SSE bytes of
`providers.sse`, so every contender runs its own HTTP stack and parser on real
sockets. It is a bare ASGI app under uvicorn (httptools + uvloop when present):
a response is a precomputed list of byte strings, cached per script position,
so serving costs a few microseconds per chunk.

What to answer is told by the model name, which every framework passes through
(in the body; for Gemini, in the URL):

    bench-<scenario>[@key=value,...]      e.g. bench-a@chunks=50,size=8,latency=50

scenario  a: text only; b: two parallel tool calls, a third, then text;
          c: text (one side's turn of a dual_ai chat); d: progress calls
          (`calls` calls of a `size`-character `query` argument, then text).
keys      chunks (text chunks), size (characters per chunk), latency (ms
          before the first byte), calls and bytes (scenario d).

The position in a script is read from the request (how many tool results it
carries), so the server keeps no per-conversation state. `GET /stats` reports
requests served and this process's CPU seconds (to show the server is not the
bottleneck); for scenario d it also holds the wall-clock time at which the
chunk closing the last progress argument was written.

Run: python -m bench.fake_provider --port 8765
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from providers.sse import SSECall, anthropic_events, gemini_events, openai_events

_NAME = re.compile(r"^(?:[a-z_]+/)?bench-(?P<scenario>[a-d])(?:@(?P<params>[a-z0-9=,_.]*))?$")
_WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jovial zebras "
_BATCH = 256  # events per write when a response is long (scenario d); short ones go one per write
_STATS: dict[str, Any] = {"requests": 0, "closing_chunk_at": None}


@dataclass(frozen=True)
class Params:
    scenario: str
    chunks: int = 20
    size: int = 8
    latency: float = 0.0  # milliseconds
    calls: int = 1
    bytes: int = 1_000_000


def parse_model(model: str) -> Params:
    match = _NAME.match(model)
    if match is None:
        raise ValueError(f"model {model!r} is not a bench model (bench-<a|b|c|d>[@k=v,...])")
    values: dict[str, Any] = {}
    for item in filter(None, (match.group("params") or "").split(",")):
        key, _, value = item.partition("=")
        values[key] = float(value) if key == "latency" else int(value)
    return Params(scenario=match.group("scenario"), **values)


def model_name(scenario: str, **params: Any) -> str:
    """The inverse of `parse_model`, for the contenders."""
    tail = ",".join(f"{k}={v}" for k, v in params.items())
    return f"bench-{scenario}@{tail}" if tail else f"bench-{scenario}"


def progress_value(size: int) -> str:
    """The `query` value of scenario d: plain text with characters JSON must escape."""
    unit = 'streamed "progress" text, a back\\slash and a new\nline; '
    return (unit * (size // len(unit) + 1))[:size]


# -- scripts -----------------------------------------------------------------


def script(p: Params, tool_results: int) -> tuple[str, list[SSECall]]:
    """Text and tool calls of the answer at this point of the conversation."""
    text = (_WORDS * (p.chunks * p.size // len(_WORDS) + 1))[: p.chunks * p.size]
    if p.scenario == "b":
        if tool_results == 0:
            return "", [
                SSECall("lookup", json.dumps({"key": "alpha"}), "call_b1"),
                SSECall("lookup", json.dumps({"key": "beta"}), "call_b2"),
            ]
        if tool_results == 2:
            return "", [SSECall("convert", json.dumps({"value": "alpha+beta"}), "call_b3")]
    if p.scenario == "d" and tool_results == 0:
        query = progress_value(p.bytes)
        return "", [SSECall("search", json.dumps({"query": query, "limit": 10}), f"call_d{i}") for i in range(p.calls)]
    return text, []


def _closing_delta(p: Params) -> int:
    """Index (among all events) of the event that closes the last progress argument."""
    value = json.dumps(progress_value(p.bytes))
    arguments = json.dumps({"query": progress_value(p.bytes), "limit": 10})
    close = len('{"query": ') + len(value) - 1  # the closing quote
    per_call = 1 + -(-len(arguments) // p.size)  # the name event, then the argument pieces
    return 1 + (p.calls - 1) * per_call + 1 + close // p.size


@lru_cache(maxsize=256)
def _events(wire: str, p: Params, tool_results: int) -> tuple[list[bytes], int | None]:
    text, calls = script(p, tool_results)
    build = {"openai": openai_events, "anthropic": anthropic_events, "gemini": gemini_events}[wire]
    events = build(text, calls, model=f"bench-{p.scenario}", usage=(100, max(1, len(text) // 4)), chunk_size=p.size)
    closing = _closing_delta(p) if p.scenario == "d" and calls and wire == "openai" else None
    if len(events) > 2 * _BATCH:
        return [
            b"".join(events[i : i + _BATCH]) for i in range(0, len(events), _BATCH)
        ], None if closing is None else closing // _BATCH
    return events, closing


def _tool_results(wire: str, body: dict[str, Any]) -> int:
    if wire == "gemini":
        return sum(
            1
            for content in body.get("contents", [])
            for part in content.get("parts", [])
            if "function_response" in part or "functionResponse" in part
        )
    count = 0
    for message in body.get("messages", []):
        if wire == "openai":
            count += message.get("role") == "tool"
        elif isinstance(message.get("content"), list):
            count += sum(
                1 for block in message["content"] if isinstance(block, dict) and block.get("type") == "tool_result"
            )
    return count


def _completion(events: list[bytes]) -> dict[str, Any]:
    """A non-streamed answer assembled from the same script (for clients that do not stream)."""
    text, calls = "", {}
    for raw in b"".join(events).split(b"\n\n"):
        line = raw.decode().removeprefix("data: ")
        if not line or line == "[DONE]":
            continue
        chunk = json.loads(line)
        for choice in chunk.get("choices", []):
            delta = choice["delta"]
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    call["index"], {"id": call.get("id"), "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["function"]["name"] += (call.get("function") or {}).get("name") or ""
                slot["function"]["arguments"] += (call.get("function") or {}).get("arguments") or ""
    message = {"role": "assistant", "content": text or None, "tool_calls": list(calls.values()) or None}
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


# -- the ASGI app --------------------------------------------------------------


async def _read_body(receive: Any) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


async def _send_json(send: Any, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": data})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    path = scope["path"]
    if scope["method"] == "GET" and path == "/stats":
        await _send_json(send, 200, {**_STATS, "cpu": time.process_time()})
        return
    if scope["method"] == "POST" and path == "/reset":
        _STATS.update(requests=0, closing_chunk_at=None)
        await _send_json(send, 200, {"ok": True})
        return
    wire = _wire(path)
    if wire is None or scope["method"] != "POST":
        await _send_json(send, 404, {"error": {"message": f"no route {scope['method']} {path}"}})
        return
    body = json.loads(await _read_body(receive))
    if wire == "gemini":  # the model is in the URL, and a Gemini request always streams on this route
        body.update(model=path.rsplit("/models/", 1)[-1].split(":", 1)[0], stream=True)
    try:
        params = parse_model(body.get("model", ""))
    except ValueError as exc:
        await _send_json(send, 400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
        return
    _STATS["requests"] += 1
    events, closing = _events(wire, params, _tool_results(wire, body))
    if params.latency:
        await asyncio.sleep(params.latency / 1000)
    if not body.get("stream"):
        await _send_json(send, 200, _completion(events) if wire == "openai" else {"error": "stream only"})
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )
    for index, event in enumerate(events):
        await send({"type": "http.response.body", "body": event, "more_body": True})
        if index == closing:
            _STATS["closing_chunk_at"] = time.time()
    await send({"type": "http.response.body", "body": b""})


def _wire(path: str) -> str | None:
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith(":streamGenerateContent"):
        return "gemini"
    return None


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    loop = "uvloop" if _has("uvloop") else "asyncio"
    http = "httptools" if _has("httptools") else "h11"
    uvicorn.run(
        app, host=args.host, port=args.port, loop=loop, http=http, log_level="warning", access_log=False, backlog=4096
    )


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
