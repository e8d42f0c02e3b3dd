"""Helpers shared by test modules (import as `from support import ...`)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.loader import Definitions


def definitions(*, tools: dict | None = None, prompts: dict | None = None, agents: dict | None = None, hooks: dict | None = None) -> Definitions:
    """Definitions built in code, named as the loader would name them."""
    return Definitions(
        root=Path("."),
        tools={k: v.named(k) for k, v in (tools or {}).items()},
        prompts={k: v.named(k) for k, v in (prompts or {}).items()},
        agents={k: v.named(k) for k, v in (agents or {}).items()},
        hooks={k: v.named(k) for k, v in (hooks or {}).items()},
    )
