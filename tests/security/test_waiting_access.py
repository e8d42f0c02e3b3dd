"""Attacks on waiting calls over HTTP (issue 46): another user's approval, edited arguments that break the
tool's schema, a second decision racing the first.

Bob gets the thread's 404 for Alice's waiting calls, on every decision route, exactly as for a thread that
does not exist, and nothing of hers changes; Alice's own bad edit is a 422 naming the field with nothing
stored; of an approval and a rejection said one after the other, only the first counts and the tool runs
once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import respx
from pydantic import BaseModel
from starlette.testclient import TestClient
from support import definitions

from orchestrator import Runtime, Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.server.app import create_app
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

TOKENS = {"alice-token-7c1e0d": "alice", "bob-token-93f2aa": "bob"}
ALICE = {"Authorization": "Bearer alice-token-7c1e0d"}
BOB = {"Authorization": "Bearer bob-token-93f2aa"}
CONFIG = {
    "providers": {"scripted": {"type": "scripted"}},
    "models": {"m": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
    "default_model": "m",
}


class Refund(BaseModel):
    order_id: str
    amount: float


RUNS: list[str] = []


async def _refund(state: Any, args: Refund) -> ToolResult:
    RUNS.append(f"{args.order_id} {args.amount:g}")
    return ToolResult.ok("refunded")


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("ORCHESTRATOR_TOKENS", raising=False)
    RUNS.clear()
    defs = definitions(
        tools={"refund": define_tool(description="Refund", args=Refund, execute=_refund, needs_approval=True)},
        prompts={"pa": define_prompt(prompt="p", tool_description="a", tools=("refund",))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
    )
    script = [ScriptedResponse(tool_calls=[ScriptedCall("refund", {"order_id": "A1", "amount": 150})])]
    script += [ScriptedResponse(text="done")] * 4
    model = ScriptedModel(script)
    with respx.mock(assert_all_called=False) as router:
        model.mount(router)
        runtime = Runtime(defs, config=config_from_dict(CONFIG), storage=SQLiteStorage(str(tmp_path / "w.db")))
        app = create_app(runtime, tokens=TOKENS, own_runtime=True)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield client


@pytest.fixture
def waiting(client: TestClient) -> tuple[str, str]:
    """Alice's thread, waiting for the approval of one refund: (thread id, call id)."""
    tid = client.post("/threads", json={"agent": "chat"}, headers=ALICE).json()["id"]
    res = client.post(f"/threads/{tid}/messages?wait=true", json={"text": "refund A1"}, headers=ALICE)
    assert res.status_code == 200 and res.json()["reason"] == "awaiting_approval"
    [call] = client.get(f"/threads/{tid}/waiting", headers=ALICE).json()["calls"]
    assert call["tool"] == "refund" and call["arguments"] == {"order_id": "A1", "amount": 150}
    return tid, call["call_id"]


def _decisions(tid: str, call_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    base = f"/threads/{tid}/calls/{call_id}"
    return [
        ("GET", f"/threads/{tid}/waiting", None),
        ("POST", f"{base}/approve", {}),
        ("POST", f"{base}/reject", {"reason": "bob says no"}),
        ("POST", f"{base}/result", {"status": "success", "result": "forged"}),
        ("POST", f"{base}/answer", {"answer": "forged"}),
    ]


def test_another_user_gets_the_threads_404_and_changes_nothing(client: TestClient, waiting: tuple[str, str]) -> None:
    tid, call_id = waiting
    for method, path, body in _decisions(tid, call_id):
        theirs = client.request(method, path, json=body, headers=BOB)
        missing = client.request(method, path.replace(tid, "thr_missing"), json=body, headers=BOB)
        assert theirs.status_code == missing.status_code == 404, (method, path)
        assert theirs.json()["error"]["code"] == missing.json()["error"]["code"] == "thread_not_found"
    [still] = client.get(f"/threads/{tid}/waiting", headers=ALICE).json()["calls"]
    assert still["decision"] is None and RUNS == []


def test_edited_arguments_that_break_the_schema_are_refused(client: TestClient, waiting: tuple[str, str]) -> None:
    tid, call_id = waiting
    for arguments in ({"order_id": "A1", "amount": "all of it"}, {"order_id": 7}, {"amount": 1, "extra": {"a": 1}}):
        res = client.post(f"/threads/{tid}/calls/{call_id}/approve", json={"arguments": arguments}, headers=ALICE)
        assert res.status_code == 422, arguments
        assert res.json()["error"]["code"] == "invalid_arguments"
    assert "amount" in res.json()["error"]["message"] or "order_id" in res.json()["error"]["message"]
    [still] = client.get(f"/threads/{tid}/waiting", headers=ALICE).json()["calls"]
    assert still["decision"] is None and RUNS == []
    res = client.post(
        f"/threads/{tid}/calls/{call_id}/approve", json={"arguments": {"order_id": "A1", "amount": 90}}, headers=ALICE
    )
    assert res.status_code == 200 and res.json()["resumed"] is True


def test_a_second_decision_is_refused_and_the_tool_runs_once(client: TestClient, waiting: tuple[str, str]) -> None:
    tid, call_id = waiting
    first = client.post(f"/threads/{tid}/calls/{call_id}/approve", json={}, headers=ALICE)
    assert first.status_code == 200 and first.json()["resumed"] is True
    again = client.post(f"/threads/{tid}/calls/{call_id}/approve", json={}, headers=ALICE)
    assert again.status_code == 200 and again.json()["resumed"] is False  # the same decision: a no-op
    other = client.post(f"/threads/{tid}/calls/{call_id}/reject", json={"reason": "changed my mind"}, headers=ALICE)
    assert other.status_code == 409 and other.json()["error"]["code"] == "not_waiting"
    assert call_id in other.json()["error"]["message"]
    wrong_kind = client.post(f"/threads/{tid}/calls/{call_id}/answer", json={"answer": 1}, headers=ALICE)
    assert wrong_kind.status_code == 409
    unknown = client.post(f"/threads/{tid}/calls/call_nope/approve", json={}, headers=ALICE)
    assert unknown.status_code == 409 and "call_nope" in unknown.json()["error"]["message"]
    for _ in range(200):
        if client.get(f"/threads/{tid}", headers=ALICE).json()["status"] == "idle":
            break
    assert RUNS == ["A1 150"]
