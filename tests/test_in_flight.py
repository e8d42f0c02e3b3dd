"""Requests past a provider's `max_in_flight` wait in the runtime, in order, not inside the HTTP pool
(`providers/in_flight.py`): httpcore's pool checks every queued request against every connection each
time one arrives or a response closes, which at 1,000 conversations took most of the process's CPU.

The provider is mocked at the HTTP layer (respx); `stream: auto` runs the runtime's OpenAI wire reader,
`stream: litellm` LiteLLM's stream.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import respx

from providers.client import ModelClient
from providers.config import ConfigError, config_from_dict
from providers.sse import openai_events
from providers.stream import StreamEnd, TextDelta

URL = "http://pool.invalid/v1/chat/completions"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOL_KEY", "sk-pool-0123456789")


def _client(stream: str, max_in_flight: int | None) -> ModelClient:
    provider: dict[str, Any] = {"type": "openai", "api_key": "${POOL_KEY}", "base_url": "http://pool.invalid/v1"}
    provider["stream"] = stream
    if max_in_flight is not None:
        provider["max_in_flight"] = max_in_flight
    models = {"m": {"provider": "p", "model": "gpt-4o-mini", "retry": {"attempts": 1}}}
    return ModelClient(config_from_dict({"providers": {"p": provider}, "models": models}))


class _Provider:
    """Holds every request until `release` is set, counting how many it holds at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = 0
        self.most = 0
        self.seen = 0
        self._arrivals = asyncio.Condition()

    async def arrived(self, n: int) -> None:
        """Wait until `n` requests have arrived (a failure guard of 5 s), then give others time to come too."""
        async with self._arrivals:
            await asyncio.wait_for(self._arrivals.wait_for(lambda: self.seen >= n), 5)
        for _ in range(50):
            await asyncio.sleep(0)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        number = self.seen
        self.holding += 1
        self.most = max(self.most, self.holding)
        async with self._arrivals:
            self._arrivals.notify_all()
        await self.release.wait()
        self.holding -= 1
        body = b"".join(openai_events(f"answer {number}", [], model="gpt-4o-mini", usage=(3, 2)))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


async def _answer(client: ModelClient) -> str:
    items = [item async for item in client.stream("m", [{"role": "user", "content": "hi"}])]
    assert isinstance(items[-1], StreamEnd)
    return "".join(item.text for item in items if isinstance(item, TextDelta))


@pytest.mark.parametrize("stream", ["auto", "litellm"])
async def test_requests_past_max_in_flight_wait_in_the_runtime(stream: str) -> None:
    provider = _Provider()
    client = _client(stream, 2)
    with respx.mock() as router:
        router.post(URL).mock(side_effect=provider)
        answers = [asyncio.create_task(_answer(client)) for _ in range(5)]
        await provider.arrived(2)
        assert (provider.holding, provider.seen) == (2, 2)  # three wait their turn before the HTTP layer
        provider.release.set()
        texts = await asyncio.gather(*answers)
    assert provider.most == 2
    assert sorted(texts) == [f"answer {n}" for n in range(1, 6)]


async def test_a_place_comes_back_when_a_waiting_or_streaming_request_is_cancelled() -> None:
    """An abort reaches a request waiting for a place as well as one in flight; neither keeps a place."""
    provider = _Provider()
    client = _client("auto", 1)
    with respx.mock() as router:
        router.post(URL).mock(side_effect=provider)
        streaming = asyncio.create_task(_answer(client))
        waiting = asyncio.create_task(_answer(client))
        await provider.arrived(1)
        assert provider.seen == 1
        waiting.cancel()
        streaming.cancel()
        await asyncio.gather(streaming, waiting, return_exceptions=True)
        provider.release.set()
        assert await asyncio.wait_for(_answer(client), 5) == "answer 2"


async def test_the_default_is_the_http_pool_size_and_a_bad_value_names_the_field() -> None:
    assert _client("auto", None).config.providers["p"].max_in_flight == 100
    with pytest.raises(ConfigError, match="max_in_flight"):
        _client("auto", 0)
