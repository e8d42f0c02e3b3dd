"""Shared pieces for the worker, broker and multi-process tests (no tests here).

A short dual_ai conversation on a scripted model that answers by looking at
the request (not by position), so any process can serve any step of any
thread: side a looks an order up, then answers; side b ends the chat.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel
from support import definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

PG_DSN = os.environ.get("ORCHESTRATOR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("ORCHESTRATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
SCRIPTED_CONFIG: dict[str, Any] = {
    "providers": {"scripted": {"type": "scripted"}},
    "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
    "default_model": "demo",
}

# Where tool runs are recorded: (thread_id, call_id, started_at). In-process
# tests read the list; worker processes also write rows to PostgreSQL.
TOOL_RUNS: list[tuple[str, str, float]] = []
TOOL_DELAY = float(os.environ.get("ORCH_TEST_TOOL_DELAY", "0"))
_recorder: Any = None  # an asyncpg pool, set in worker processes


def set_recorder(pool: Any) -> None:
    global _recorder
    _recorder = pool


class LookupArgs(BaseModel):
    order_id: str


class EndArgs(BaseModel):
    reason: str = ""


async def _record(state: Any) -> None:
    import asyncio

    call_id = state._call.call_id if state._call is not None else "?"
    started = time.time()
    TOOL_RUNS.append((state.thread_id, call_id, started))
    if _recorder is not None:
        await _recorder.execute(
            "INSERT INTO tool_runs (thread_id, call_id, started_at, pid) VALUES ($1, $2, $3, $4)",
            state.thread_id,
            call_id,
            started,
            os.getpid(),
        )
    if TOOL_DELAY:
        await asyncio.sleep(TOOL_DELAY)


async def _lookup(state: Any, args: LookupArgs) -> ToolResult:
    await _record(state)
    return ToolResult(status="success", result=f"Order {args.order_id}: shipped")


async def _end(state: Any, args: EndArgs) -> ToolResult:
    await _record(state)
    return ToolResult(status="success", result="bye")


def duo_definitions() -> Any:
    return definitions(
        tools={
            "lookup_order": define_tool(description="Look up an order", args=LookupArgs, execute=_lookup),
            "end_chat": define_tool(description="End the chat", args=EndArgs, execute=_end),
        },
        prompts={
            "agent_p": define_prompt(prompt="You are support.", tool_description="support", tools=("lookup_order",)),
            "customer_p": define_prompt(prompt="You are a customer.", tool_description="customer", tools=("end_chat",)),
        },
        agents={
            "duo": define_agent(
                type="dual_ai",
                side_a=Side("agent_p", max_steps=4),
                side_b=Side("customer_p", end_conversation_tool="end_chat"),
                max_session_turns=6,
            ),
            "chat": define_agent(type="ai_human", side_a=Side("agent_p", max_steps=4)),
        },
    )


def answer(body: dict[str, Any]) -> ScriptedResponse:
    """Side a: look the order up, then answer. Side b: end the chat."""
    messages = body["messages"]
    system = str(messages[0].get("content"))
    if "support" in system:
        if messages[-1]["role"] == "tool":
            return ScriptedResponse(text="Order 42 has shipped.", chunk_size=64)
        return ScriptedResponse(tool_calls=[ScriptedCall("lookup_order", {"order_id": "42"})])
    return ScriptedResponse(text="Thanks!", tool_calls=[ScriptedCall("end_chat", {"reason": "done"})])


# the stored shape of one finished duo thread: (side, role, tool name)
DUO_SHAPE = [
    ("a", "assistant", "lookup_order"),
    ("a", "tool", None),
    ("a", "assistant", None),
    ("b", "assistant", "end_chat"),
    ("b", "tool", None),
]


def shape(messages: list[Any]) -> list[tuple[Any, str, str | None]]:
    return [(m.side, m.role, m.tool_calls[0].name if m.tool_calls else None) for m in messages]


class UniqueIdsModel(ScriptedModel):
    """Tool-call ids unique across processes (the plain model counts from 0 in each)."""

    def __init__(self, script: Any, tag: str) -> None:
        super().__init__(script)
        self._tag = tag.encode()

    def _events(self, step: ScriptedResponse, model: str) -> list[bytes]:
        return [re.sub(rb'"call_(\d+_\d+)"', b'"call_' + self._tag + rb'_\1"', e) for e in super()._events(step, model)]


async def postgres_reachable() -> str | None:
    try:
        import asyncpg

        conn = await asyncpg.connect(PG_DSN, timeout=3)
        await conn.close()
    except Exception as exc:
        return f"PostgreSQL not reachable at {PG_DSN}: {exc}"
    return None


async def redis_reachable() -> str | None:
    try:
        from redis.asyncio import Redis

        client = Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        await client.ping()
        await client.aclose()
    except Exception as exc:
        return f"Redis not reachable at {REDIS_URL}: {exc}"
    return None


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards."""
    reason = await postgres_reachable()
    if reason:
        pytest.skip(reason)
    import asyncpg

    schema = f"test_{uuid.uuid4().hex[:16]}"
    yield schema
    conn = await asyncpg.connect(PG_DSN)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A unique key prefix on the test Redis, its keys deleted afterwards."""
    reason = await redis_reachable()
    if reason:
        pytest.skip(reason)
    from redis.asyncio import Redis

    prefix = f"test{uuid.uuid4().hex[:12]}"
    yield prefix
    client = Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
