"""Cost of secret redaction when many secrets are known; prints a markdown table.

Issue 15 (item 3): one runtime-wide redactor held every secret any thread had
read and tried each one (sorted, on every string), so 20,000 secrets of other
users made Alice's run 3.5x slower. Secrets are now scoped per thread and each
scope is one compiled Aho-Corasick matcher.

Two measurements:
- one ai_human run (tool call + answer, a 4 KB tool result, real SQLite, a
  scripted provider behind respx) for Alice, with no other secrets, with
  20,000 secrets in 20,000 other threads, with 20,000 global secrets (the
  worst case for the new matcher: every one applies to her), and with the
  old loop over 20,000 secrets put back in place of the matcher;
- redacting one 4 KB text with N secrets: the old loop (sorted, `in` and
  `replace` per secret) against the compiled matcher.

Run: .venv/bin/python bench/redaction.py [--runs N] [--secrets N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import respx  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from orchestrator import Side, define_agent, define_prompt, define_tool  # noqa: E402
from orchestrator.core.secrets import Redactor  # noqa: E402
from orchestrator.core.settings import RuntimeSettings  # noqa: E402
from orchestrator.definitions.loader import Definitions  # noqa: E402
from orchestrator.runtime import Runtime  # noqa: E402
from orchestrator.storage.sqlite import SQLiteStorage  # noqa: E402
from providers.config import config_from_dict  # noqa: E402
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse  # noqa: E402

TEXT = ("order 42 shipped to the border town; lookup_order said ok. " * 70)[:4096]


class _Q(BaseModel):
    q: str = ""


def _definitions() -> Definitions:
    async def lookup(state: Any, args: _Q) -> dict:
        return {"status": "success", "result": TEXT}

    tool = define_tool(description="Look up", args=_Q, execute=lookup).named("lookup")
    prompt = define_prompt(prompt="You help.", tool_description="t", tools=("lookup",)).named("pa")
    agent = define_agent(type="ai_human", side_a=Side("pa", max_steps=4)).named("ag")
    return Definitions(root=Path("."), tools={"lookup": tool}, prompts={"pa": prompt}, agents={"ag": agent}, hooks={})


def _secret(i: int) -> str:
    return f"user-secret-{i:06d}-{(i * 7919) % 100003:05d}"


async def _runs(scope: str, secrets: int, runs: int) -> float:
    """Median ms of Alice's run with `secrets` secrets known in `scope` ('none', 'others', 'global')."""
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-redaction-0123456789")
    config = config_from_dict(
        {
            "providers": {"openai": {"api_key": "${OPENAI_API_KEY}"}},
            "models": {"gpt": {"provider": "openai", "model": "gpt-4o-mini"}},
            "default_model": "gpt",
        }
    )
    script = [ScriptedResponse(tool_calls=[ScriptedCall("lookup", {})]), ScriptedResponse(text="done")] * (runs + 1)
    model = ScriptedModel(script, wire="openai")
    timings: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, respx.mock(assert_all_called=False) as router:
        model.mount(router, "https://api.openai.com/v1")
        runtime = Runtime(
            _definitions(), config=config, storage=SQLiteStorage(f"{tmp}/bench.db"), settings=RuntimeSettings()
        )
        async with runtime:
            for i in range(secrets if scope != "none" else 0):
                runtime.services.redactor.add(_secret(i), f"thr_other_{i}" if scope == "others" else None)
            if scope == "old":  # every call site gets the pre-issue-15 loop over every secret
                old = _OldRedactor({_secret(i) for i in range(secrets)})
                runtime.services.redactor.for_thread = lambda _thread_id: old  # type: ignore[method-assign]
            for _ in range(runs + 1):
                thread = await runtime.create_thread("ag", user_id="alice")
                started = time.perf_counter()
                await thread.send("where is my order?")
                timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings[1:])


class _OldRedactor(Redactor):
    """The runtime-wide redactor before issue 15, behind today's interface."""

    def __init__(self, secrets: set[str]) -> None:
        super().__init__()
        self._all = secrets
        self._size = len(secrets)

    def text(self, value: str) -> str:
        return _old_text(self._all, value)


def _old_text(secrets: set[str], value: str) -> str:
    """The redactor before issue 15: every secret, sorted, on every string."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in value:
            value = value.replace(secret, "***")
    return value


def _per_text(secrets: int, repeat: int) -> tuple[float, float]:
    values = {_secret(i) for i in range(secrets)}
    redactor = Redactor(values)
    started = time.perf_counter()
    for _ in range(repeat):
        _old_text(values, TEXT)
    old = (time.perf_counter() - started) * 1e6 / repeat
    started = time.perf_counter()
    for _ in range(repeat):
        redactor.text(TEXT)
    new = (time.perf_counter() - started) * 1e6 / repeat
    return old, new


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of Alice's thread per case (median)")
    parser.add_argument("--secrets", type=int, default=20_000, help="secrets known besides Alice's")
    options = parser.parse_args()
    print(f"| Alice's run (median of {options.runs}) | ms |")
    print("|---|---:|")
    asyncio.run(_runs("none", 0, 2))  # warm up: imports, LiteLLM's first request
    for label, scope in (
        ("no other secrets", "none"),
        (f"{options.secrets:,} secrets in other threads", "others"),
        (f"{options.secrets:,} global secrets (all apply to her)", "global"),
        (f"{options.secrets:,} secrets, the old runtime-wide loop (before issue 15)", "old"),
    ):
        print(f"| {label} | {asyncio.run(_runs(scope, options.secrets, options.runs)):.1f} |", flush=True)
    print()
    print("| secrets | old loop, per 4 KB text (us) | compiled matcher (us) |")
    print("|---:|---:|---:|")
    for count in (10, 1_000, options.secrets):
        old, new = _per_text(count, 20 if count > 1000 else 200)
        print(f"| {count:,} | {old:,.0f} | {new:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
