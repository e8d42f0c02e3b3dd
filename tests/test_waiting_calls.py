"""Calls waiting for the outside (orchestrator/engine/waiting.py): approvals, deferred results, `state.ask`.

On each provider's bytes (OpenAI, Anthropic, Gemini served by the scripted model through respx), a step
asks for two calls, one needing approval: the other runs, the execution ends `awaiting_approval`, the
thread rests; a decision resumes it, and the next request pairs every call with its result in the
provider's own shape. Restarts use a new Runtime on the same SQLite file (and PostgreSQL); tool runs are
counted so a call that ran twice fails the test. Expiry runs on a fake clock.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import respx
from pydantic import BaseModel
from storage_backends import PG_DSN, FakeClock, postgres_unreachable
from support import Q, definitions

from orchestrator import Runtime, Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.core.waiting import WaitingCallError
from orchestrator.storage.base import Storage
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall

WIRES: dict[str, dict[str, Any]] = {
    "openai": {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {"m": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
        "default_model": "m",
    },
    "anthropic": {
        "providers": {"p": {"type": "anthropic", "api_key": "${WAITING_TEST_KEY}"}},
        "models": {
            "m": {"provider": "p", "model": "claude-sonnet-4-5", "params": {"max_tokens": 64}, "retry": {"attempts": 1}}
        },
        "default_model": "m",
    },
    "gemini": {
        "providers": {"p": {"type": "gemini", "api_key": "${WAITING_TEST_KEY}"}},
        "models": {
            "m": {"provider": "p", "model": "gemini-2.5-flash", "params": {"max_tokens": 64}, "retry": {"attempts": 1}}
        },
        "default_model": "m",
    },
}


class Refund(BaseModel):
    order_id: str
    amount: float


class Rig:
    """One agent `chat` whose side a may call `refund` (approval over 100), `lookup`, `ship` (deferred)
    and `confirm` (asks twice); every run of a tool is counted."""

    def __init__(self, tmp_path: Path, wire: str = "openai", *, clock: FakeClock | None = None) -> None:
        self.tmp_path = tmp_path
        self.wire = wire
        self.clock = clock or FakeClock()
        self.runs: list[str] = []
        self.runtimes: list[Runtime] = []

    def defs(self) -> Any:
        async def refund(state: Any, args: Refund) -> ToolResult:
            self.runs.append(f"refund {args.order_id} {args.amount:g}")
            return ToolResult.ok(f"refunded {args.amount:g} on {args.order_id}")

        async def lookup(state: Any, args: Q) -> ToolResult:
            self.runs.append(f"lookup {args.q}")
            return ToolResult.ok(f"found {args.q}")

        async def ship(state: Any, args: Q) -> ToolResult:
            self.runs.append(f"ship {args.q}")
            return ToolResult.deferred()

        async def confirm(state: Any, args: Q) -> ToolResult:
            self.runs.append(f"confirm {args.q}")
            first = await state.ask({"question": f"Really {args.q}?"})
            second = await state.ask({"question": "Sure?"})
            return ToolResult.ok(f"answers: {first}, {second}")

        tools = {
            "refund": define_tool(
                description="Refund an order",
                args=Refund,
                execute=refund,
                needs_approval=lambda state, args: args.amount > 100,
                approval_timeout=60,
            ),
            "lookup": define_tool(description="Look something up", args=Q, execute=lookup),
            "ship": define_tool(description="Ship an order", args=Q, execute=ship),
            "confirm": define_tool(description="Confirm with the customer", args=Q, execute=confirm),
        }
        prompt = define_prompt(prompt="You help.", tool_description="a", tools=("refund", "lookup", "ship", "confirm"))
        return definitions(
            tools=tools, prompts={"pa": prompt}, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))}
        )

    async def runtime(self, storage: Storage | None = None) -> Runtime:
        store = storage or SQLiteStorage(str(self.tmp_path / "w.db"))
        rt = Runtime(self.defs(), config=config_from_dict(WIRES[self.wire]), storage=store, clock=self.clock)
        await rt.open()
        self.runtimes.append(rt)
        return rt

    async def close(self) -> None:
        for rt in self.runtimes:
            await rt.close()


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITING_TEST_KEY", "k-waiting-test-0123456789")


def _serve(script: list[Any], wire: str) -> tuple[ScriptedModel, respx.MockRouter]:
    model = ScriptedModel(script, wire=wire)  # type: ignore[arg-type]
    router = respx.mock(assert_all_called=False)
    model.mount(router)
    return model, router


def pairing(wire: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(call ids, result ids) of a request in the provider's own shape; every call must have one result."""
    if wire == "openai":
        calls = [c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    elif wire == "anthropic":
        blocks = [(m["role"], b) for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
        calls = [b["id"] for role, b in blocks if b.get("type") == "tool_use"]
        results = [b["tool_use_id"] for role, b in blocks if b.get("type") == "tool_result"]
    else:
        parts = [p for c in body["contents"] for p in c.get("parts", [])]
        calls = [p["function_call"]["name"] for p in parts if "function_call" in p]  # LiteLLM's snake_case
        results = [p["function_response"]["name"] for p in parts if "function_response" in p]
    return calls, results


def results_text(wire: str, body: dict[str, Any]) -> str:
    return json.dumps(body["messages"] if wire != "gemini" else body["contents"])


async def _events(rt: Runtime, thread_id: str) -> list[Any]:
    await rt.services.bus.flush(thread_id)
    return await rt.storage.events_after(thread_id, 0)


# -- approvals on each provider's bytes ---------------------------------------------


@pytest.mark.parametrize("wire", ["openai", "anthropic", "gemini"])
async def test_approve_then_reject_resumes_with_valid_pairing(tmp_path: Path, wire: str) -> None:
    rig = Rig(tmp_path, wire)
    script = [
        R(tool_calls=[C("refund", {"order_id": "A1", "amount": 150}), C("lookup", {"q": "A1"})]),
        R(tool_calls=[C("refund", {"order_id": "B2", "amount": 500})]),
        R(text="Refunded A1; B2 was refused."),
    ]
    model, router = _serve(script, wire)
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        first = await thread.send("refund A1")
        assert first.reason == "awaiting_approval"
        assert rig.runs == ["lookup A1"]  # the other call ran; the refund waits
        assert thread.record.status == "waiting"
        [waiting] = await thread.waiting_calls()
        assert (waiting.kind, waiting.tool, waiting.arguments) == (
            "approval",
            "refund",
            {"order_id": "A1", "amount": 150},
        )
        assert len(model.requests) == 1

        task = await thread.approve(waiting.call_id)
        assert task is not None
        second = await task
        assert second.reason == "awaiting_approval"  # the next step asks for another refund
        assert rig.runs == ["lookup A1", "refund A1 150"]
        [again] = await thread.waiting_calls()
        task = await thread.reject(again.call_id, "over the limit for this customer")
        assert task is not None
        done = await task
        assert done.output == "Refunded A1; B2 was refused."
        await thread.refresh()
        assert thread.record.status == "idle"
        assert rig.runs == ["lookup A1", "refund A1 150"]  # the rejected one never ran
        for body in model.requests[1:]:
            calls, results = pairing(wire, body)
            assert sorted(calls) == sorted(results) and calls
        assert "over the limit for this customer" in results_text(wire, model.requests[2])
        types = [e.type for e in await _events(rt, thread.id)]
        assert types.count("approval_requested") == 2 and types.count("approval_decided") == 2
        with pytest.raises(WaitingCallError, match="decided already"):
            await thread.approve(waiting.call_id, {"order_id": "A1", "amount": 1})
        await rig.close()


async def test_edited_arguments_are_checked_and_used(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    model, router = _serve([R(tool_calls=[C("refund", {"order_id": "A1", "amount": 150})]), R(text="ok")], "openai")
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        await thread.send("refund")
        [waiting] = await thread.waiting_calls()
        with pytest.raises(WaitingCallError, match="amount"):
            await thread.approve(waiting.call_id, {"order_id": "A1", "amount": "lots"})
        assert (await thread.waiting_calls())[0].open  # nothing stored
        task = await thread.approve(waiting.call_id, {"order_id": "A1", "amount": 120})
        assert task is not None
        await task
        assert rig.runs == ["refund A1 120"]
        assert "refunded 120 on A1" in results_text("openai", model.requests[1])
        await rig.close()


async def test_expiry_rejects_with_a_reason_the_model_reads(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    model, router = _serve([R(tool_calls=[C("refund", {"order_id": "A1", "amount": 150})]), R(text="ok")], "openai")
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        await thread.send("refund")
        [waiting] = await thread.waiting_calls()
        assert waiting.expires_at == rig.clock.now + 60
        rig.clock.advance(61)
        assert await rt.expire_waiting_calls() == 1
        while (await thread.refresh()).status != "idle":
            await asyncio.sleep(0)
        assert rig.runs == []
        assert "the approval expired" in results_text("openai", model.requests[1])
        with pytest.raises(WaitingCallError, match="decided already"):
            await thread.approve(waiting.call_id)
        await rig.close()


async def test_stop_while_waiting_answers_every_call(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    script = [R(tool_calls=[C("refund", {"order_id": "A1", "amount": 150})]), R(text="ok after stop")]
    model, router = _serve(script, "openai")
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        await thread.send("refund")
        [waiting] = await thread.waiting_calls()
        result = await thread.stop_waiting("the customer left")
        assert result is not None and result.reason == "stopped" and result.stopped_by == "caller"
        assert (await thread.refresh()).status == "stopped"
        tools = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
        assert [m.tool_call_id for m in tools] == [waiting.call_id]
        assert "the customer left" in (tools[0].content or "")
        with pytest.raises(WaitingCallError, match="decided already"):
            await thread.approve(waiting.call_id)
        await thread.send("hello again")  # the history is valid: the next request pairs the call
        calls, results = pairing("openai", model.requests[1])
        assert calls == results == [waiting.call_id]
        assert rig.runs == []
        await rig.close()


async def test_send_while_waiting_is_refused(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    _, router = _serve([R(tool_calls=[C("refund", {"order_id": "A1", "amount": 150})])], "openai")
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        await thread.send("refund")
        with pytest.raises(WaitingCallError, match="waiting for decisions"):
            await thread.send("are you there?")
        with pytest.raises(WaitingCallError, match="not waiting"):
            await thread.approve("call_nope")
        await rig.close()


# -- restarts: a new process decides -------------------------------------------------


async def _restart_case(rig: Rig, make_storage: Any) -> None:
    script = [
        R(tool_calls=[C("refund", {"order_id": "A1", "amount": 150}), C("lookup", {"q": "A1"})]),
        R(text="done"),
    ]
    model, router = _serve(script, rig.wire)
    with router:
        rt = await rig.runtime(make_storage())
        thread = await rt.create_thread("chat")
        await thread.send("refund")
        thread_id = thread.id
        await rt.close()  # the process goes away while the call waits

        rt2 = await rig.runtime(make_storage())
        again = await rt2.get_thread(thread_id)
        assert again.record.status == "waiting"
        [waiting] = await again.waiting_calls()
        task = await again.approve(waiting.call_id)
        assert task is not None
        assert (await task).output == "done"
        assert rig.runs == ["lookup A1", "refund A1 150"]  # each once
        calls, results = pairing(rig.wire, model.requests[1])
        assert sorted(calls) == sorted(results) and len(calls) == 2
        await rig.close()


@pytest.mark.parametrize("wire", ["openai", "anthropic", "gemini"])
async def test_restart_while_waiting_sqlite(tmp_path: Path, wire: str) -> None:
    rig = Rig(tmp_path, wire)
    await _restart_case(rig, lambda: SQLiteStorage(str(tmp_path / "w.db")))


async def test_restart_while_waiting_postgres(tmp_path: Path) -> None:
    reason = await postgres_unreachable()
    if reason:
        pytest.skip(reason)
    import uuid

    import asyncpg

    from orchestrator.storage.postgres import PostgresStorage

    schema = f"test_{uuid.uuid4().hex[:16]}"
    try:
        await _restart_case(Rig(tmp_path), lambda: PostgresStorage(PG_DSN, schema=schema))
    finally:
        conn = await asyncpg.connect(PG_DSN)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


# -- deferred results and questions ----------------------------------------------------


async def test_deferred_result_is_submitted_later(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    model, router = _serve([R(tool_calls=[C("ship", {"q": "A1"})]), R(text="shipped")], "openai")
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        first = await thread.send("ship A1")
        assert first.reason == "awaiting_result"
        [waiting] = await thread.waiting_calls()
        assert waiting.kind == "result"
        with pytest.raises(WaitingCallError, match="submit_result"):
            await thread.approve(waiting.call_id)
        await rt.close()
        rt2 = await rig.runtime()
        again = await rt2.get_thread(thread.id)
        task = await again.submit_result(waiting.call_id, ToolResult.ok("tracking number 42"))
        assert task is not None
        assert (await task).output == "shipped"
        assert rig.runs == ["ship A1"]  # the job started once; its result came from outside
        assert "tracking number 42" in results_text("openai", model.requests[1])
        await rig.close()


async def test_ask_across_a_restart_returns_stored_answers_in_order(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    model, router = _serve([R(tool_calls=[C("confirm", {"q": "cancel"})]), R(text="cancelled")], "openai")
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        first = await thread.send("cancel it")
        assert first.reason == "awaiting_answer"
        [asked] = await thread.waiting_calls()
        assert asked.payload == {"question": "Really cancel?"} and asked.position == 0
        await rt.close()
        rt2 = await rig.runtime()
        again = await rt2.get_thread(thread.id)
        assert await again.answer(asked.call_id, "yes") is None or True
        while (await again.refresh()).status != "waiting" or not await again.waiting_calls():
            await asyncio.sleep(0)
        [second] = await again.waiting_calls()
        assert (second.call_id, second.position, second.payload) == (asked.call_id, 1, {"question": "Sure?"})
        task = await again.answer(asked.call_id, "very")
        assert task is not None
        assert (await task).output == "cancelled"
        assert "answers: yes, very" in results_text("openai", model.requests[1])
        assert rig.runs == ["confirm cancel"] * 3  # runs again from its start after each answer
        types = [e.type for e in await _events(rt2, thread.id)]
        assert types.count("question_asked") == 2 and types.count("question_answered") == 2
        await rig.close()


async def test_two_approvals_racing_decide_once(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    _, router = _serve([R(tool_calls=[C("refund", {"order_id": "A1", "amount": 150})]), R(text="ok")], "openai")
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        await thread.send("refund")
        [waiting] = await thread.waiting_calls()
        outcomes = await asyncio.gather(
            thread.approve(waiting.call_id),
            thread.reject(waiting.call_id, "no"),
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, WaitingCallError)]
        tasks = [o for o in outcomes if isinstance(o, asyncio.Task)]
        assert len(errors) == 1 and len(tasks) == 1
        await tasks[0]
        assert rig.runs in ([], ["refund A1 150"])
        same = await thread.waiting_calls(include_decided=True)
        assert len(same) == 1 and same[0].decision is not None
        await rig.close()


async def test_needs_approval_true_on_a_plain_tool(tmp_path: Path) -> None:
    runs: list[str] = []

    async def delete(state: Any, args: Q) -> ToolResult:
        runs.append(args.q)
        return ToolResult.ok("deleted")

    defs = definitions(
        tools={"delete": define_tool(description="Delete", args=Q, execute=delete, needs_approval=True)},
        prompts={"pa": define_prompt(prompt="p", tool_description="a", tools=("delete",))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
    )
    _, router = _serve([R(tool_calls=[C("delete", {"q": "x"})]), R(text="gone")], "openai")
    with router:
        rt = Runtime(defs, config=config_from_dict(WIRES["openai"]), storage=SQLiteStorage(str(tmp_path / "p.db")))
        async with rt:
            thread = await rt.create_thread("chat")
            assert (await thread.send("delete x")).reason == "awaiting_approval"
            assert runs == []
            [waiting] = await thread.waiting_calls()
            task = await thread.approve(waiting.call_id)
            assert task is not None and (await task).output == "gone"
            assert runs == ["x"]


def test_settings_take_an_approval_timeout() -> None:
    assert RuntimeSettings(approval_timeout=30).approval_timeout == 30
    with pytest.raises(ValueError, match="approval_timeout"):
        RuntimeSettings(approval_timeout=0)


# -- invoke_tool, queue_tool, stop() ---------------------------------------------------


def _nested_defs(runs: list[str]) -> Any:
    async def charge(state: Any, args: Q) -> ToolResult:
        runs.append(f"charge {args.q}")
        return ToolResult.ok(f"charged {args.q}")

    async def checkout(state: Any, args: Q) -> ToolResult:
        runs.append(f"checkout {args.q}")
        paid = await state.invoke_tool("charge", {"q": args.q})
        return ToolResult.ok(f"checked out: {paid.result or paid.error}")

    async def plan(state: Any, args: Q) -> ToolResult:
        runs.append(f"plan {args.q}")
        state.queue_tool("charge", {"q": args.q})
        return ToolResult.ok("planned")

    tools = {
        "charge": define_tool(description="Charge", args=Q, execute=charge, needs_approval=True),
        "checkout": define_tool(description="Check out", args=Q, execute=checkout, uses=("charge",)),
        "plan": define_tool(description="Plan", args=Q, execute=plan, uses=("charge",)),
    }
    prompt = define_prompt(prompt="p", tool_description="a", tools=("checkout", "plan"))
    return definitions(
        tools=tools, prompts={"pa": prompt}, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))}
    )


async def test_invoke_tool_waits_for_the_invoked_tools_approval(tmp_path: Path) -> None:
    runs: list[str] = []
    model, router = _serve([R(tool_calls=[C("checkout", {"q": "cart"})]), R(text="ok")], "openai")
    with router:
        rt = Runtime(
            _nested_defs(runs), config=config_from_dict(WIRES["openai"]), storage=SQLiteStorage(str(tmp_path / "i.db"))
        )
        async with rt:
            thread = await rt.create_thread("chat")
            assert (await thread.send("buy")).reason == "awaiting_approval"
            [waiting] = await thread.waiting_calls()
            assert (waiting.tool, waiting.arguments) == ("charge", {"q": "cart"})  # the invoked tool, under its caller
            assert runs == ["checkout cart"]
            task = await thread.approve(waiting.call_id)
            assert task is not None
            await task
            assert runs == ["checkout cart", "checkout cart", "charge cart"]  # the caller ran again, charge once
            assert "checked out: charged cart" in results_text("openai", model.requests[1])


async def test_a_queued_call_waits_for_its_approval(tmp_path: Path) -> None:
    runs: list[str] = []
    model, router = _serve([R(tool_calls=[C("plan", {"q": "x"})]), R(text="ok")], "openai")
    with router:
        rt = Runtime(
            _nested_defs(runs), config=config_from_dict(WIRES["openai"]), storage=SQLiteStorage(str(tmp_path / "q.db"))
        )
        async with rt:
            thread = await rt.create_thread("chat")
            assert (await thread.send("plan")).reason == "awaiting_approval"
            [waiting] = await thread.waiting_calls()
            assert waiting.tool == "charge" and runs == ["plan x"]
            task = await thread.reject(waiting.call_id, "not today")
            assert task is not None
            await task
            assert runs == ["plan x"]  # planned once, the charge never ran
            calls, results = pairing("openai", model.requests[1])
            assert sorted(calls) == sorted(results) and len(calls) == 2
            assert "not today" in results_text("openai", model.requests[1])


async def test_stop_on_a_waiting_thread_ends_it_in_the_background(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    _, router = _serve([R(tool_calls=[C("ship", {"q": "A1"})])], "openai")
    with router:
        rt = await rig.runtime()
        thread = await rt.create_thread("chat")
        await thread.send("ship")
        assert thread.stop("changed plans") is True
        while (await thread.refresh()).status != "stopped":
            await asyncio.sleep(0)
        [decided] = await thread.waiting_calls(include_decided=True)
        assert decided.decision is not None and decided.decision.kind == "stopped"
        assert thread.stop() is False  # nothing left to stop
        await rig.close()
