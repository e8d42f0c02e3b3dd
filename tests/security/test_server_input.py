"""Attack: nesting and serialization (issue 15, item 7), and the body limit that held.

`PUT /threads/{id}/values/{key}` with JSON nested 490+ levels answered 500
and stored the value anyway; every later GET of the key was a 500.
docs/server.md promises no 500s: deep or unserializable input is refused
(400/422) before anything is stored.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.schemas import MAX_JSON_DEPTH

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(runtime, tokens={}, max_body_bytes=200_000, own_runtime=True)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def thread_id(client: TestClient) -> str:
    return str(client.post("/threads", json={"agent": "support_demo"}).json()["id"])


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 490, 5_000, 90_000])
def test_deep_json_value_is_refused_and_not_stored(client: TestClient, thread_id: str, depth: int) -> None:
    res = client.put(f"/threads/{thread_id}/values/k", content='{"value": ' + _nested(depth) + "}", headers=JSON)
    assert res.status_code in (400, 422), res.text
    assert "nests deeper" in res.text or res.json()["error"]["code"] == "invalid_json"
    got = client.get(f"/threads/{thread_id}/values/k")
    assert got.status_code == 200 and got.json()["value"] is None


def test_value_at_the_limit_round_trips(client: TestClient, thread_id: str) -> None:
    body = '{"value": ' + _nested(MAX_JSON_DEPTH) + "}"
    assert client.put(f"/threads/{thread_id}/values/k", content=body, headers=JSON).status_code == 200
    value = client.get(f"/threads/{thread_id}/values/k").json()["value"]
    assert str(value).count("[") == MAX_JSON_DEPTH


def test_deep_agent_arguments_are_refused_before_a_thread_exists(client: TestClient) -> None:
    before = len(client.get("/threads").json()["threads"])
    body = '{"agent": "support_demo", "arguments": {"x": ' + _nested(300) + "}}"
    res = client.post("/threads", content=body, headers=JSON)
    assert res.status_code == 422 and "nests deeper" in res.json()["error"]["message"]
    assert len(client.get("/threads").json()["threads"]) == before


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "1e999", '"\\ud800"', '{"a": [1, "\\udfff"]}', "1" + "0" * 5000])
def test_unserializable_value_is_refused_and_not_stored(client: TestClient, thread_id: str, raw: str) -> None:
    res = client.put(f"/threads/{thread_id}/values/k", content='{"value": ' + raw + "}", headers=JSON)
    assert res.status_code in (400, 422), res.text
    assert client.get(f"/threads/{thread_id}/values/k").json()["value"] is None


async def test_a_deep_value_stored_before_the_limit_answers_an_error_not_500(runtime: Runtime) -> None:
    await runtime.open()
    thread = await runtime.create_thread("support_demo")
    deep: list = []
    for _ in range(400):
        deep = [deep]
    await thread.state.set_value("old", deep)
    await runtime.close()
    app = create_app(runtime, own_runtime=True)
    with TestClient(app, raise_server_exceptions=False) as client:
        res = client.get(f"/threads/{thread.id}/values/old")
    assert res.status_code == 422 and res.json()["error"]["code"] == "value_too_deep"


def test_body_over_the_limit_is_refused_before_it_is_read(client: TestClient, thread_id: str) -> None:
    """Held in the attack run: stays covered."""
    big = '{"value": "' + "x" * 300_000 + '"}'
    res = client.put(f"/threads/{thread_id}/values/k", content=big, headers=JSON)
    assert res.status_code == 413 and res.json()["error"]["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"value": "'
        for _ in range(30):
            yield b"y" * 10_000
        yield b'"}'

    res = client.put(f"/threads/{thread_id}/values/k", content=chunks(), headers=JSON)
    assert res.status_code == 413
    assert client.get(f"/threads/{thread_id}/values/k").json()["value"] is None


def test_a_secret_too_short_to_redact_is_refused_over_http(client: TestClient, thread_id: str) -> None:
    res = client.put(f"/threads/{thread_id}/env/PIN", json={"value": "abc", "type": "secret"})
    assert res.status_code == 422 and "at least 4 characters" in res.json()["error"]["message"]
    assert client.get(f"/threads/{thread_id}/env").json()["env"] == []
    assert client.put(f"/threads/{thread_id}/env/PIN", json={"value": "abc", "type": "text"}).status_code == 200
