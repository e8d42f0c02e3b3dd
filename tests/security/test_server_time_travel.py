"""Attacks on fork, rewind and the fork tree (issue 48): another user's thread stays a 404 (the same as
a missing one), a fork belongs to the thread's own user whatever the caller says, bad points and bodies
are 422s naming the field, and a rewind during an execution is a 409."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from orchestrator.core.messages import Message, ToolCall
from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app

TOKENS = {"alice-token-7c1e0d": "alice", "bob-token-93f2aa": "bob"}
ALICE = {"Authorization": "Bearer alice-token-7c1e0d"}
BOB = {"Authorization": "Bearer bob-token-93f2aa"}


@pytest.fixture
def client(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("ORCHESTRATOR_TOKENS", raising=False)
    with TestClient(create_app(runtime, tokens=TOKENS, own_runtime=True), base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
def ran(client: TestClient) -> tuple[str, list[dict]]:
    """Alice's support_demo thread with a step that called a tool (stored as the executor stores one)."""
    tid = client.post("/threads", json={"agent": "support_demo"}, headers=ALICE).json()["id"]
    runtime: Runtime = client.app.state.server.runtime  # type: ignore[attr-defined]
    history = [
        Message(thread_id=tid, side="a", role="assistant", content="Hello"),
        Message(thread_id=tid, side="b", role="assistant", content="Where is order 42?"),
        Message(thread_id=tid, side="a", role="assistant", tool_calls=[ToolCall(id="call_1", name="lookup_order")]),
        Message(thread_id=tid, side="a", role="tool", tool_call_id="call_1", name="lookup_order", content="shipped"),
        Message(thread_id=tid, side="a", role="assistant", content="It shipped."),
    ]
    client.portal.call(runtime.storage.append_messages, tid, history)  # type: ignore[union-attr]
    messages = client.get(f"/threads/{tid}/messages", headers=ALICE).json()["messages"]
    assert len(messages) == len(history)
    return tid, messages


def _valid(messages: list[dict]) -> int:
    """A point with no open call: the last message."""
    return int(messages[-1]["seq"])


def test_a_fork_belongs_to_the_threads_user_and_bob_sees_neither(client: TestClient, ran: tuple) -> None:
    tid, messages = ran
    at = _valid(messages)
    res = client.post(f"/threads/{tid}/fork", json={"at": at}, headers=ALICE)
    assert res.status_code == 201, res.text
    fork = res.json()
    assert (fork["user_id"], fork["forked_from"], fork["forked_at"]) == ("alice", tid, at)
    assert client.get(f"/threads/{fork['id']}", headers=BOB).status_code == 404
    assert client.post(f"/threads/{tid}/fork", json={"at": at}, headers=BOB).json()["error"]["code"] == (
        "thread_not_found"
    )
    assert client.post(f"/threads/{tid}/fork", json={"at": at, "user_id": "bob"}, headers=ALICE).status_code == 422
    tree = client.get(f"/threads/{fork['id']}/tree", headers=ALICE).json()
    assert tree["root"] == tid and [t["id"] for t in tree["threads"]] == [tid, fork["id"]]
    assert fork["id"] not in client.get("/threads", headers=BOB).text


@pytest.mark.parametrize(
    "body",
    [{}, {"at": 0}, {"at": -1}, {"at": "1"}, {"at": True}, {"at": 1.5}, {"at": 2**70}, {"at": None}, [1]],
)
def test_bad_fork_bodies_are_422_naming_the_field(client: TestClient, ran: tuple, body: object) -> None:
    tid, _ = ran
    res = client.post(f"/threads/{tid}/fork", json=body, headers=ALICE)
    assert res.status_code == 422, (body, res.text)
    assert res.json()["error"]["field"] is None or "body" in res.json()["error"]["field"]


def test_points_no_message_holds_or_inside_a_step_are_422_with_the_nearest_points(
    client: TestClient, ran: tuple
) -> None:
    tid, messages = ran
    res = client.post(f"/threads/{tid}/rewind", json={"to": 10**6}, headers=ALICE)
    assert res.status_code == 422 and res.json()["error"]["field"] == "body.to"
    assert "no message with seq 1000000" in res.json()["error"]["message"]
    calling = next(m["seq"] for m in messages if m["tool_calls"])
    res = client.post(f"/threads/{tid}/fork", json={"at": calling}, headers=ALICE)
    assert res.status_code == 422 and res.json()["error"]["field"] == "body.at"
    message = res.json()["error"]["message"]
    assert "inside a step" in message and f"nearest valid points: before {calling - 1}, after {calling + 1}" in message


def test_rewind_hides_later_messages_and_bob_cannot_rewind(client: TestClient, ran: tuple) -> None:
    tid, messages = ran
    first = messages[0]["seq"]
    assert client.post(f"/threads/{tid}/rewind", json={"to": first}, headers=BOB).status_code == 404
    assert len(client.get(f"/threads/{tid}/messages", headers=ALICE).json()["messages"]) == len(messages)
    res = client.post(f"/threads/{tid}/rewind", json={"to": first}, headers=ALICE)
    assert res.status_code == 200 and res.json()["superseded"] == len(messages) - 1
    shown = client.get(f"/threads/{tid}/messages", headers=ALICE).json()["messages"]
    assert [m["seq"] for m in shown] == [first]
    kept = client.get(f"/threads/{tid}/messages?include_superseded=true", headers=ALICE).json()["messages"]
    assert len(kept) == len(messages) and sum(m["superseded"] for m in kept) == len(messages) - 1


async def test_rewind_while_an_execution_holds_the_lease_is_409(client: TestClient, ran: tuple) -> None:
    tid, messages = ran
    runtime: Runtime = client.app.state.server.runtime  # type: ignore[attr-defined]
    lease = client.portal.call(runtime.storage.acquire_lease, tid, "elsewhere/exec-1", 60.0)  # type: ignore[union-attr]
    res = client.post(f"/threads/{tid}/rewind", json={"to": messages[0]["seq"]}, headers=ALICE)
    assert res.status_code == 409 and res.json()["error"]["code"] == "thread_busy"
    client.portal.call(runtime.storage.release_lease, lease)  # type: ignore[union-attr]
