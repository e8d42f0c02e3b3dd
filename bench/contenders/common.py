"""What every contender shares: the tools, prompts and per-scenario step counts.

The tools do trivial work so the benchmark measures the frameworks, and each
framework declares them with its own API (typed functions or pydantic models).
"""

from __future__ import annotations

import json
from typing import Any

SYSTEM = "You are a benchmark agent. Use the tools when asked."
USER = "Look up alpha and beta, convert them, then answer."
OPENER = "Start the conversation."
DUAL_TURNS_PER_SIDE = 10
STEPS = {"a": 1, "b": 3, "c": 2 * DUAL_TURNS_PER_SIDE, "d": 2}  # model requests per conversation


def lookup(key: str) -> str:
    """Look up a value by its key."""
    return f"value-of-{key}"


def convert(value: str) -> str:
    """Convert a value to its canonical form."""
    return value.upper()


def search(query: str, limit: int = 10) -> str:
    """Search the corpus; `query` may be long (it is the progress argument)."""
    return f"searched {len(query)} characters, {limit} hits"


TOOLS = {"lookup": lookup, "convert": convert, "search": search}
SCENARIO_TOOLS = {"a": (), "b": ("lookup", "convert"), "c": (), "d": ("search",)}

_PARAMS = {
    "lookup": {"key": {"type": "string", "description": "The key"}},
    "convert": {"value": {"type": "string", "description": "The value"}},
    "search": {
        "query": {"type": "string", "description": "What to search"},
        "limit": {"type": "integer", "description": "Hits"},
    },
}


def openai_tools(scenario: str) -> list[dict[str, Any]]:
    """Chat Completions tool schemas, for the hand-written loops."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": TOOLS[name].__doc__,
                "parameters": {"type": "object", "properties": _PARAMS[name], "required": list(_PARAMS[name])[:1]},
            },
        }
        for name in SCENARIO_TOOLS[scenario]
    ]


def run_tool(name: str, arguments: str) -> str:
    return str(TOOLS[name](**json.loads(arguments or "{}")))
