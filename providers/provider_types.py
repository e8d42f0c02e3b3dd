"""Which provider `type:` names exist: LiteLLM's families plus the runtime's own.

Checked when a config loads, so `type: openia` fails there, with a did-you-mean,
instead of at the first request with LiteLLM's text.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path

__all__ = ["OFFLINE_TYPES", "check_type", "did_you_mean"]

OFFLINE_TYPES = ("scripted", "offline")  # no key, OpenAI wire format


def did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


_COMMON_TYPES = frozenset(
    {
        "openai",
        "anthropic",
        "gemini",
        "vertex_ai",
        "azure",
        "bedrock",
        "openrouter",
        "ollama",
        "groq",
        "mistral",
        "xai",
        "deepseek",
        "together_ai",
        "fireworks_ai",
        "cohere",
    }
)


@functools.cache
def _litellm_provider_types() -> frozenset[str]:
    """LiteLLM's provider families, read from its `LlmProviders` enum's source: importing
    LiteLLM takes seconds, and a config is checked on every start. Empty if not found."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    path = Path(list(spec.submodule_search_locations)[0]) / "types" / "utils.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return frozenset()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "LlmProviders":
            return frozenset(
                stmt.value.value
                for stmt in node.body
                if isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            )
    return frozenset()


def check_type(value: str) -> None:
    """ValueError with a did-you-mean when `value` is no LiteLLM provider family (nor ours)."""
    if value in OFFLINE_TYPES or value in _COMMON_TYPES:
        return
    known = _litellm_provider_types()
    if known and value not in known:
        hint = did_you_mean(value, known | _COMMON_TYPES | set(OFFLINE_TYPES)) or " (see LiteLLM's provider list)"
        raise ValueError(f"unknown provider type '{value}'{hint}")
