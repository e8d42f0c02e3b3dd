"""Attacks that held (issue 15): tokens, and one user reaching another's thread over HTTP or the WebSocket.

Every route wants a valid bearer token when tokens are configured; a token
in the URL is never accepted; Bob gets the same 404 for Alice's thread as for
one that does not exist, on every route and on the socket; Bob cannot create
threads in Alice's name; secret env values are never answered.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

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
def alices(client: TestClient) -> str:
    res = client.post("/threads", json={"agent": "support_demo"}, headers=ALICE)
    assert res.status_code == 201
    tid = str(res.json()["id"])
    assert (
        client.put(
            f"/threads/{tid}/env/API_SECRET", json={"value": "alice-private-value-55"}, headers=ALICE
        ).status_code
        == 200
    )
    return tid


def _routes(tid: str) -> list[tuple[str, str, dict | None]]:
    return [
        ("GET", f"/threads/{tid}", None),
        ("GET", f"/threads/{tid}/messages", None),
        ("POST", f"/threads/{tid}/run", None),
        ("POST", f"/threads/{tid}/messages", {"text": "hi"}),
        ("POST", f"/threads/{tid}/stop", None),
        ("POST", f"/threads/{tid}/force-turn", {"side": "a"}),
        ("GET", f"/threads/{tid}/values/k", None),
        ("PUT", f"/threads/{tid}/values/k", {"value": 1}),
        ("GET", f"/threads/{tid}/env", None),
        ("PUT", f"/threads/{tid}/env/API_SECRET", {"value": "bob-overwrites"}),
        ("POST", f"/threads/{tid}/fork", {"at": 1}),
        ("POST", f"/threads/{tid}/rewind", {"to": 1}),
        ("GET", f"/threads/{tid}/tree", None),
    ]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Basic YWxpY2U6eA=="},
        {"Authorization": "Bearer alice-token-7c1e0"},
        {"Authorization": "Bearer alice-token-7c1e0dX"},
    ],
)
def test_every_route_wants_a_valid_token(client: TestClient, alices: str, headers: dict[str, str]) -> None:
    for method, path, body in [
        *_routes(alices),
        ("GET", "/threads", None),
        ("POST", "/threads", {"agent": "support_demo"}),
        ("GET", "/agents", None),
        ("GET", "/tools", None),
    ]:
        res = client.request(method, path, json=body, headers=headers)
        assert res.status_code == 401, (method, path, res.status_code)
        assert res.headers["www-authenticate"] == "Bearer"
        assert "alice-token" not in res.text


def test_a_token_in_the_url_is_not_accepted(client: TestClient) -> None:
    assert client.get("/threads?token=alice-token-7c1e0d").status_code == 401
    assert client.get("/threads?access_token=alice-token-7c1e0d").status_code == 401


def test_bob_cannot_see_or_touch_alices_thread(client: TestClient, alices: str) -> None:
    missing = "thr_" + "0" * 32
    for (method, path, body), (_, missing_path, _) in zip(_routes(alices), _routes(missing), strict=True):
        res = client.request(method, path, json=body, headers=BOB)
        assert res.status_code == 404, (method, path, res.status_code)
        other = client.request(method, missing_path, json=body, headers=BOB)
        assert res.json()["error"]["code"] == other.json()["error"]["code"] == "thread_not_found"  # ids do not leak
    assert alices not in client.get("/threads", headers=BOB).text
    assert client.get(f"/threads/{alices}/values/k", headers=ALICE).json()["value"] is None  # Bob's PUT did nothing
    env = client.get(f"/threads/{alices}/env", headers=ALICE).json()["env"]
    assert env == [{"name": "API_SECRET", "type": "secret", "value": None}]  # never answered, even to Alice


def test_bob_cannot_create_a_thread_in_alices_name(client: TestClient) -> None:
    res = client.post("/threads", json={"agent": "support_demo", "user_id": "alice"}, headers=BOB)
    assert res.status_code == 403 and res.json()["error"]["code"] == "forbidden_user"
    assert client.get("/threads", headers=ALICE).json()["threads"] == []


def test_bob_cannot_open_alices_websocket(client: TestClient, alices: str) -> None:
    url = f"ws://127.0.0.1/threads/{alices}/events"
    attempts: list[dict] = [
        {"headers": BOB},
        {"subprotocols": ["bearer", "bob-token-93f2aa"]},
        {},
        {"subprotocols": ["bearer", "wrong"]},
    ]
    for options in attempts:
        with pytest.raises(WebSocketDisconnect) as denied, client.websocket_connect(url, **options):
            pass
        assert denied.value.status_code in (401, 404), options  # type: ignore[attr-defined]
    with client.websocket_connect(url, subprotocols=["bearer", "alice-token-7c1e0d"]) as ws:  # the owner may
        assert ws.receive_json()["type"] == "thread_created"
