"""Helpers shared by test modules (import as `from support import ...`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.loader import Definitions


def definitions(
    *, tools: dict | None = None, prompts: dict | None = None, agents: dict | None = None, hooks: dict | None = None
) -> Definitions:
    """Definitions built in code, named as the loader would name them."""
    return Definitions(
        root=Path("."),
        tools={k: v.named(k) for k, v in (tools or {}).items()},
        prompts={k: v.named(k) for k, v in (prompts or {}).items()},
        agents={k: v.named(k) for k, v in (agents or {}).items()},
        hooks={k: v.named(k) for k, v in (hooks or {}).items()},
    )


class Q(BaseModel):
    """A one-field argument model for test tools."""

    q: str = ""


def tool_names(request: dict[str, Any]) -> list[str]:
    """The tool names a model request offered."""
    return [t["function"]["name"] for t in request.get("tools") or []]
