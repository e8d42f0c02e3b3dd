"""Parse cost per chunk, per provider and per stream path, without sockets.

    python bench/parse.py [--rounds 7]

For each wire (OpenAI, Anthropic, Gemini) one answer's exact SSE bytes (built by
`providers.sse`) are served by respx to `ModelClient.stream`, once with the
runtime's wire reader (`stream: auto`) and once with LiteLLM's stream
(`stream: litellm`). The CPU of a short (20 chunks) and a long (220 chunks)
answer is measured; per chunk is the slope between them, so the per-request
cost (parameter mapping, request building, connection) cancels out and is
reported on its own (the intercept). Medians of `--rounds` interleaved rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SHORT, LONG, REPEAT = 20, 220, 20
_WIRES = {
    "OpenAI": ("openai", "gpt-4o-mini", "http://parse.invalid/v1", r"parse\.invalid/v1/chat/completions"),
    "Anthropic": ("anthropic", "claude-sonnet-4-5", "http://parse.invalid", r"parse\.invalid/v1/messages"),
    "Gemini": ("gemini", "gemini-2.5-flash", "http://parse.invalid", r"parse\.invalid/models/.*:streamGenerateContent"),
}


def _body(wire: str, model: str, chunks: int) -> bytes:
    from providers.sse import anthropic_events, gemini_events, openai_events

    build = {"openai": openai_events, "anthropic": anthropic_events, "gemini": gemini_events}[wire]
    text = "".join(f"w{i:06d} " for i in range(chunks))  # distinct chunks: LiteLLM stops a stream that repeats one
    return b"".join(build(text, [], model=model, usage=(10, chunks), chunk_size=8))


def _client(wire: str, model: str, base: str, stream: str) -> Any:
    from providers.client import ModelClient
    from providers.config import config_from_dict

    return ModelClient(
        config_from_dict(
            {
                "providers": {"p": {"type": wire, "api_key": "parse-key", "base_url": base, "stream": stream}},
                "models": {
                    "m": {"provider": "p", "model": model, "retry": {"attempts": 1}, "params": {"max_tokens": 100}}
                },
            }
        )
    )


async def _cpu(client: Any, route: Any, body: bytes) -> float:
    import httpx

    route.mock(return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body))
    messages = [{"role": "user", "content": "hi"}]
    start = time.process_time()
    for _ in range(REPEAT):
        async for _item in client.stream("m", messages):
            pass
    return (time.process_time() - start) / REPEAT


async def measure(rounds: int) -> dict[tuple[str, str], tuple[float, float]]:
    """(wire name, path) -> (seconds per chunk, seconds per request besides its chunks)."""
    import respx

    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with respx.mock(assert_all_called=False) as router:
        for _ in range(rounds):
            for name, (wire, model, base, url) in _WIRES.items():
                route = router.post(url__regex=url)
                for path, stream in (("wire reader", "auto"), ("LiteLLM stream", "litellm")):
                    client = _client(wire, model, base, stream)
                    await _cpu(client, route, _body(wire, model, SHORT))  # warm
                    short = await _cpu(client, route, _body(wire, model, SHORT))
                    long = await _cpu(client, route, _body(wire, model, LONG))
                    per_chunk = (long - short) / (LONG - SHORT)
                    samples.setdefault((name, path), []).append((per_chunk, short - SHORT * per_chunk))
    return {
        key: (statistics.median(s[0] for s in rows), statistics.median(s[1] for s in rows))
        for key, rows in samples.items()
    }


def table(results: dict[tuple[str, str], tuple[float, float]]) -> str:
    lines = [
        "| provider | stream path | CPU per chunk, us | CPU per request besides chunks, ms "
        "| x OpenAI wire reader (per chunk) |",
        "|---|---|---:|---:|---:|",
    ]
    base = results[("OpenAI", "wire reader")][0]
    for (name, path), (chunk, request) in results.items():
        lines.append(f"| {name} | {path} | {chunk * 1e6:.1f} | {request * 1e3:.2f} | x{chunk / base:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from providers.client import warm_up

    warm_up()
    print(table(asyncio.run(measure(args.rounds))))


if __name__ == "__main__":
    main()
