"""Attack: the open default server is reachable sideways (issue 15, item 6).

With no token and a loopback bind, a request with `Host: attacker.example`
got 200 (DNS rebinding), a WebSocket from `Origin: http://evil.example` was
accepted, a cross-site `text/plain` POST to `/threads/{id}/stop` worked with
no preflight, and the page had no CSP, X-Frame-Options or nosniff; the
server would also listen on any address with no token, with a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.cli import is_loopback, serve
from orchestrator.server.guard import LOOPBACK_HOSTS

ROOT = Path(__file__).resolve().parents[2]
OWN = {"Host": "127.0.0.1:8000"}
EVIL = "http://evil.example"


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(runtime, tokens={}, allowed_hosts=LOOPBACK_HOSTS, own_runtime=True)
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        yield client


@pytest.fixture
def thread_id(client: TestClient) -> str:
    res = client.post("/threads", json={"agent": "support_demo"})
    assert res.status_code == 201, res.text
    return str(res.json()["id"])


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8000", "127.0.0.1.nip.io", ""])
def test_dns_rebinding_host_is_refused(client: TestClient, host: str) -> None:
    res = client.get("/threads", headers={"Host": host})
    assert res.status_code == 400
    assert res.json()["error"]["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "127.0.0.1"])
def test_loopback_names_are_served(client: TestClient, host: str) -> None:
    assert client.get("/threads", headers={"Host": host}).status_code == 200


def test_websocket_from_another_origin_is_refused(client: TestClient, thread_id: str) -> None:
    with (
        pytest.raises(WebSocketDisconnect) as denied,
        client.websocket_connect(f"ws://127.0.0.1:8000/threads/{thread_id}/events", headers={"Origin": EVIL}),
    ):
        pass
    assert denied.value.status_code == 403  # type: ignore[attr-defined]  # the HTTP denial, as for a stranger's token
    assert denied.value.json()["error"]["code"] == "cross_origin"  # type: ignore[attr-defined]


def test_websocket_from_the_page_itself_or_no_browser_is_accepted(client: TestClient, thread_id: str) -> None:
    for headers in ({"Origin": "http://127.0.0.1:8000"}, {}):
        with client.websocket_connect(f"ws://127.0.0.1:8000/threads/{thread_id}/events", headers=headers) as ws:
            assert ws.receive_json()["type"] == "thread_created"


def test_websocket_on_a_rebound_host_is_refused(client: TestClient, thread_id: str) -> None:
    headers = {"Host": "attacker.example:8000", "Origin": "http://attacker.example:8000"}
    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect(f"ws://127.0.0.1:8000/threads/{thread_id}/events", headers=headers),
    ):
        pass


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": EVIL},  # fetch(..., {mode: "no-cors", method: "POST"}) from another site
        {"Origin": EVIL, "Content-Type": "text/plain"},
        {"Origin": "null"},  # a sandboxed iframe or a file:// page
        {"Sec-Fetch-Site": "cross-site"},  # a browser that sends Sec-Fetch-Site but no Origin
        {"Content-Type": "text/plain"},  # a form's body type: the API reads JSON only
        {"Content-Type": "application/x-www-form-urlencoded"},
    ],
)
def test_cross_site_simple_request_cannot_change_state(
    client: TestClient, thread_id: str, headers: dict[str, str]
) -> None:
    for path, body in ((f"/threads/{thread_id}/stop", None), (f"/threads/{thread_id}/force-turn", '{"side": "b"}')):
        res = client.post(path, headers=headers, content=body)
        assert res.status_code in (403, 415), (path, headers, res.status_code)
    res = client.put(f"/threads/{thread_id}/values/k", headers=headers, content='{"value": 1}')
    assert res.status_code in (403, 415)
    assert client.get(f"/threads/{thread_id}/values/k").json()["value"] is None  # nothing was stored


def test_same_origin_page_and_plain_clients_still_write(client: TestClient, thread_id: str) -> None:
    same = {"Origin": "http://127.0.0.1:8000", "Sec-Fetch-Site": "same-origin"}
    assert client.post(f"/threads/{thread_id}/stop", headers=same).status_code == 200
    assert client.post(f"/threads/{thread_id}/stop").status_code == 200  # curl: no Origin
    assert client.put(f"/threads/{thread_id}/values/k", json={"value": 1}, headers=same).status_code == 200


def test_other_origins_can_be_allowed(runtime: Runtime) -> None:
    app = create_app(
        runtime, allowed_hosts=LOOPBACK_HOSTS, allowed_origins=["https://app.example.com"], own_runtime=True
    )
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        tid = client.post(
            "/threads", json={"agent": "support_demo"}, headers={"Origin": "https://app.example.com"}
        ).json()["id"]
        assert client.post(f"/threads/{tid}/stop", headers={"Origin": EVIL}).status_code == 403


def test_the_page_forbids_inline_script_framing_sniffing_and_referrers(client: TestClient) -> None:
    for path in ("/", "/static/app.js"):
        res = client.get(path)
        assert res.status_code == 200
        csp = res.headers["content-security-policy"]
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
        assert directives["script-src"] == "'self'" and "unsafe" not in csp
        assert directives["frame-ancestors"] == "'none'"
        assert res.headers["x-frame-options"] == "DENY"
        assert res.headers["x-content-type-options"] == "nosniff"
        assert res.headers["referrer-policy"] == "no-referrer"
    api = client.get("/threads")
    assert api.headers["x-content-type-options"] == "nosniff" and api.headers["x-frame-options"] == "DENY"
    refused = client.get("/threads", headers={"Host": "evil.example"})
    assert refused.headers["x-content-type-options"] == "nosniff"


def test_serve_refuses_a_public_address_without_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRATOR_TOKENS", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = [
        "--path",
        str(ROOT / "agents"),
        "--config",
        str(ROOT / "configs/default.yaml"),
        "--db",
        ":memory:",
        "--host",
        "0.0.0.0",
    ]
    result = CliRunner().invoke(serve, args)
    assert result.exit_code == 2
    assert "no tokens configured: refusing to serve on 0.0.0.0" in result.output


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
