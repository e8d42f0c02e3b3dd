"""Hand-written agent loops: the floors every framework is measured against.

`LiteLLMLoop` is the least code anyone on LiteLLM can write: stream with
`litellm.acompletion`, gather text and tool-call deltas, run the tools, repeat.
It runs on the HTTP transport the runtime uses (httpx) unless `aiohttp=True`
(LiteLLM's own default). `OpenAILoop` is the same loop on the `openai` SDK: the
floor of the floors. `ModelClientLoop` reads through the runtime's provider layer
(bench/gap.py).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from .common import DUAL_TURNS_PER_SIDE, OPENER, SYSTEM, USER, openai_tools, run_tool


class _Loop:
    name = "loop"

    async def _stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        raise NotImplementedError

    async def _step(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """One streamed request; returns the assistant message."""
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}  # index -> id, name, argument parts (joined once: no quadratic +=)
        async for chunk in await self._stream(model, messages, tools):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                text.append(delta.content)
            for call in delta.tool_calls or ():
                slot = calls.setdefault(call.index or 0, {"id": call.id, "name": "", "parts": []})
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["parts"].append(call.function.arguments or "")
        return _assistant(text, calls)

    async def _agent(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """Steps until an answer without tool calls; parallel calls run concurrently."""
        steps = 0
        while True:
            message = await self._step(model, messages, tools)
            steps += 1
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return steps
            results = await asyncio.gather(*(_run(c) for c in calls))
            messages.extend(results)

    async def conversation(self, scenario: str, model: str) -> int:
        tools = openai_tools(scenario)
        if scenario != "c":
            return await self._agent(
                model, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}], tools
            )
        sides = [
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": OPENER}],
            [{"role": "system", "content": SYSTEM}],
        ]
        steps = 0
        for turn in range(2 * DUAL_TURNS_PER_SIDE):
            mine, other = sides[turn % 2], sides[(turn + 1) % 2]
            steps += await self._agent(model, mine, tools)
            other.append({"role": "user", "content": mine[-1]["content"]})
        return steps

    async def close(self) -> None:
        pass


def _assistant(text: list[str], calls: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The assistant message a step's gathered deltas make."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": "".join(c["parts"])}}
            for _, c in sorted(calls.items())
        ]
    return message


async def _run(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": run_tool(call["function"]["name"], call["function"]["arguments"]),
    }


class LiteLLMLoop(_Loop):
    """`wire` picks LiteLLM's route: `openai/` (the fake's /v1/chat/completions), `anthropic/` or `gemini/`."""

    def __init__(self, base_url: str, *, aiohttp: bool = False, wire: str = "openai") -> None:
        self.name = "litellm loop (aiohttp)" if aiohttp else f"litellm loop ({wire})"
        self._wire = wire
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.disable_aiohttp_transport = not aiohttp
        litellm.suppress_debug_info = True
        litellm.telemetry = False
        self._litellm = litellm
        self._base = f"{base_url}/v1" if wire == "openai" else base_url

    async def _stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        return await self._litellm.acompletion(
            model=f"{self._wire}/{model}",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            api_base=self._base,
            api_key="bench",
            max_retries=0,
            **kwargs,
        )


class OpenAILoop(_Loop):
    name = "openai SDK loop"

    def __init__(self, base_url: str) -> None:
        import httpx
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        # Room for 1,000 requests at once (the SDK's default pool waits, then times out the rest).
        pool = DefaultAsyncHttpxClient(limits=httpx.Limits(max_connections=2000))
        self._client = AsyncOpenAI(
            base_url=f"{base_url}/v1", api_key="bench", max_retries=0, timeout=600.0, http_client=pool
        )

    async def _stream(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        return await self._client.chat.completions.create(
            model=model, messages=messages, stream=True, stream_options={"include_usage": True}, **kwargs
        )

    async def close(self) -> None:
        await self._client.close()


class ModelClientLoop(_Loop):
    """The same loop reading through the runtime's provider layer alone (`providers.client.ModelClient`,
    a provider with `stream: litellm`): no executor, storage or events. Against `LiteLLMLoop` it is
    what the provider layer adds (retries, the idle deadline, the tap, the neutral items); see bench/gap.py."""

    def __init__(self, base_url: str, *, wire: str = "openai") -> None:
        self.name = f"ModelClient loop ({wire}, stream: litellm)"
        self._wire = wire
        self._base = f"{base_url}/v1" if wire == "openai" else base_url
        self._clients: dict[str, Any] = {}  # per model name: a config names one model

    def _client(self, model: str) -> Any:
        if model not in self._clients:
            from providers.client import ModelClient
            from providers.config import config_from_dict

            provider = {"type": self._wire, "base_url": self._base, "api_key": "bench", "stream": "litellm"}
            alias = {"provider": "bench", "model": model, "retry": {"attempts": 1}, "timeout": 600}
            config = config_from_dict({"providers": {"bench": provider}, "models": {"bench": alias}})
            self._clients[model] = ModelClient(config)
        return self._clients[model]

    async def _step(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        from providers.stream import TextDelta, ToolCallDelta

        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async for item in self._client(model).stream("bench", messages, tools=tools or None):
            if isinstance(item, TextDelta):
                text.append(item.text)
            elif isinstance(item, ToolCallDelta):
                slot = calls.setdefault(item.index, {"id": item.id, "name": "", "parts": []})
                slot["id"] = slot["id"] or item.id
                slot["name"] += item.name or ""
                slot["parts"].append(item.arguments)
        return _assistant(text, calls)
