"""The contenders: each runs the same scenarios against the fake provider.

Every contender has `name`, `async conversation(scenario, model) -> steps` and
`async close()`; heavy imports happen in `make`, inside the worker process.
"""

from __future__ import annotations

from typing import Any

CONTENDERS = (
    "runtime",
    "runtime_litellm",
    "litellm",
    "litellm_aiohttp",
    "agents_litellm",
    "agents_native",
    "pydantic_ai",
    "openai",
)
LABELS = {
    "runtime": "this runtime",
    "runtime_litellm": "this runtime (stream: litellm)",
    "runtime_nofreeze": "this runtime (gc_freeze off)",
    "litellm": "litellm loop",
    "litellm_aiohttp": "litellm loop (aiohttp)",
    "agents_litellm": "Agents SDK + LiteLLM",
    "agents_native": "Agents SDK native",
    "pydantic_ai": "PydanticAI",
    "openai": "openai SDK loop",
}


def make(key: str, base_url: str) -> Any:
    if key.startswith("runtime"):
        from .runtime import RuntimeContender

        if key not in ("runtime", "runtime_litellm", "runtime_nofreeze"):
            raise ValueError(f"unknown contender {key!r}; known: {', '.join(CONTENDERS)}")
        return RuntimeContender(base_url, stream="litellm" if key == "runtime_litellm" else "auto", gc_freeze=key != "runtime_nofreeze")
    if key in ("litellm", "litellm_aiohttp"):
        from .loops import LiteLLMLoop

        return LiteLLMLoop(base_url, aiohttp=key == "litellm_aiohttp")
    if key == "openai":
        from .loops import OpenAILoop

        return OpenAILoop(base_url)
    if key in ("agents_litellm", "agents_native"):
        from .peers import AgentsSDK

        return AgentsSDK(base_url, litellm=key == "agents_litellm")
    if key == "pydantic_ai":
        from .peers import PydanticAI

        return PydanticAI(base_url)
    raise ValueError(f"unknown contender {key!r}; known: {', '.join(CONTENDERS)}")
