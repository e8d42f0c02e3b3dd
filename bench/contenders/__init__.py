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
    "runtime_anthropic",
    "runtime_anthropic_litellm",
    "litellm_anthropic",
    "runtime_gemini",
    "runtime_gemini_litellm",
    "litellm_gemini",
)
PROVIDER_CONTENDERS = frozenset(
    k for k in CONTENDERS if k.endswith(("_anthropic", "_gemini", "_anthropic_litellm", "_gemini_litellm"))
)
"""Contenders on the Anthropic or Gemini wire: they run scenarios (b) and (c) only."""
LABELS = {
    "runtime": "this runtime, OpenAI (wire reader)",
    "runtime_litellm": "this runtime, OpenAI (stream: litellm)",
    "runtime_nofreeze": "this runtime, OpenAI (wire reader, gc_freeze and gc_defer_full off)",
    "runtime_nodefer": "this runtime, OpenAI (wire reader, gc_defer_full off)",
    "litellm": "bare litellm loop, OpenAI",
    "litellm_aiohttp": "bare litellm loop, OpenAI (aiohttp)",
    "agents_litellm": "Agents SDK + LiteLLM",
    "agents_native": "Agents SDK native",
    "pydantic_ai": "PydanticAI",
    "openai": "openai SDK loop",
    "runtime_anthropic": "this runtime, Anthropic (wire reader)",
    "runtime_anthropic_litellm": "this runtime, Anthropic (stream: litellm)",
    "litellm_anthropic": "bare litellm loop, Anthropic",
    "runtime_gemini": "this runtime, Gemini (wire reader)",
    "runtime_gemini_litellm": "this runtime, Gemini (stream: litellm)",
    "litellm_gemini": "bare litellm loop, Gemini",
}
_RUNTIMES = {
    "runtime": ("openai", "auto"),
    "runtime_litellm": ("openai", "litellm"),
    "runtime_nofreeze": ("openai", "auto"),
    "runtime_nodefer": ("openai", "auto"),
    "runtime_anthropic": ("anthropic", "auto"),
    "runtime_anthropic_litellm": ("anthropic", "litellm"),
    "runtime_gemini": ("gemini", "auto"),
    "runtime_gemini_litellm": ("gemini", "litellm"),
}
_LOOPS = {
    "litellm": "openai",
    "litellm_aiohttp": "openai",
    "litellm_anthropic": "anthropic",
    "litellm_gemini": "gemini",
}


def make(key: str, base_url: str) -> Any:
    if key in _RUNTIMES:
        from .runtime import RuntimeContender

        wire, stream = _RUNTIMES[key]
        return RuntimeContender(
            base_url,
            stream=stream,
            gc_freeze=key != "runtime_nofreeze",
            gc_defer_full=key not in ("runtime_nofreeze", "runtime_nodefer"),
            wire=wire,
        )
    if key in _LOOPS:
        from .loops import LiteLLMLoop

        return LiteLLMLoop(base_url, aiohttp=key == "litellm_aiohttp", wire=_LOOPS[key])
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
