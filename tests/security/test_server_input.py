"""Attack: nesting and serialization (issue 15, item 7), and the body limit that held.

`PUT /threads/{id}/values/{key}` with JSON nested 490+ levels answered 500
and stored the value anyway; every later GET of the key was a 500.
docs/server.md promises no 500s: deep or unserializable input is refused
(400/422) before anything is stored.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from support import Q, chat_definitions

from orchestrator import ToolAttachment, ToolResult, define_tool
from orchestrator.core.results import AttachmentRef
from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.schemas import MAX_JSON_DEPTH
from providers.scripted import ScriptedCall, ScriptedResponse

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


# -- attachments' types (issue 43, item 5) -------------------------------------------------------
#
# A tool's attachment (that is, model output) with CR/LF in its MIME type was stored as it came,
# and its download route then failed with no response at all (the type became a header). Types are
# now checked when an attachment is stored (RFC 6838 `type/subtype`, parameters as RFC 9110 has
# them, no controls), and a type stored before that is served as a download, never as a header.

BAD_TYPES = ["text/plain\r\nSet-Cookie: x=1", "image/png\n", "text/html\x00", "text", "/png", "ima ge/png", "a/b;c"]
GOOD_TYPES = ["image/png", "application/vnd.api+json", "text/plain; charset=utf-8", 'text/plain;format="flowed"']


def _attaching(mime: str) -> Any:
    async def attach(state: Any, args: Q) -> ToolResult:
        data = base64.b64encode(b"hello").decode()
        return ToolResult.ok("made it", attachments=[ToolAttachment(name="a.txt", mime_type=mime, data=data)])

    return define_tool(description="Attach a file", args=Q, execute=attach)


@pytest.mark.parametrize("mime", BAD_TYPES)
async def test_a_tool_attachment_with_a_bad_type_is_an_error_result_naming_the_field(
    make_runtime: Any, mime: str
) -> None:
    defs = chat_definitions({"attach": _attaching(mime)}, ("attach",))
    script = [ScriptedResponse(tool_calls=[ScriptedCall("attach", {"q": "x"})]), ScriptedResponse(text="ok")]
    rt, _ = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    await thread.send("go")
    [result] = [m for m in (await thread.get_messages(include_silent=True)).messages if m.role == "tool"]
    assert result.tool_status == "error" and "mime_type" in (result.content or ""), result.content
    assert result.attachments == []


@pytest.mark.parametrize("mime", GOOD_TYPES)
async def test_a_tool_attachment_with_a_good_type_is_stored(make_runtime: Any, mime: str) -> None:
    defs = chat_definitions({"attach": _attaching(mime)}, ("attach",))
    script = [ScriptedResponse(tool_calls=[ScriptedCall("attach", {"q": "x"})]), ScriptedResponse(text="ok")]
    rt, _ = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    await thread.send("go")
    [result] = [m for m in (await thread.get_messages(include_silent=True)).messages if m.role == "tool"]
    assert result.tool_status == "success" and [a.mime_type for a in result.attachments] == [mime]


@pytest.mark.parametrize("mime", BAD_TYPES[:3])
def test_a_bad_type_stored_before_the_check_is_served_as_a_download(
    client: TestClient, thread_id: str, runtime: Runtime, mime: str
) -> None:
    ref = AttachmentRef(id="file_old", name="old.txt", mime_type=mime, size=5)
    client.portal.call(runtime.storage.put_file, thread_id, ref, b"hello")  # type: ignore[union-attr]
    res = client.get(f"/threads/{thread_id}/files/file_old")
    assert res.status_code == 200 and res.content == b"hello"
    assert res.headers["content-type"] == "application/octet-stream"
    assert "set-cookie" not in res.headers and res.headers["content-disposition"].startswith("attachment")


# -- /docs (issue 43, item 5) -------------------------------------------------------------------
#
# FastAPI's /docs and /redoc were served to anyone, without a CSP, loading Swagger UI and ReDoc from a
# CDN at a floating version without integrity, on the origin where the page keeps its token in
# localStorage. They are off; `docs=True` (`serve --docs`) serves a page that loads one pinned release,
# integrity-checked, with no inline script, under the page's CSP widened by that release's path only.


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/docs/oauth2-redirect"])
def test_api_docs_are_not_served_unless_asked_for(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 404
    assert client.get("/openapi.json").status_code == 200  # the API's shape: clients build from it


def test_docs_when_asked_for_load_only_integrity_checked_scripts_under_a_csp(runtime: Runtime) -> None:
    from orchestrator.server.docs import SWAGGER_UI
    from orchestrator.server.guard import DOCS_CSP

    app = create_app(runtime, tokens={}, own_runtime=True, docs=True)
    with TestClient(app, raise_server_exceptions=False) as client:
        res = client.get("/docs")
        assert client.get("/redoc").status_code == 404
    assert res.status_code == 200 and "text/html" in res.headers["content-type"]
    policy = res.headers["content-security-policy"]
    assert policy == DOCS_CSP and "unsafe" not in policy and "default-src 'none'" in policy
    assert "@5/" not in res.text  # a pinned release, not whatever the CDN serves as 5 today
    tags = re.findall(r"<(script|link)\b([^>]*)>", res.text)
    external = [attrs for _, attrs in tags if "https://" in attrs]
    assert len(external) == 2 and all('integrity="sha384-' in attrs for attrs in external)
    assert all(" src=" in attrs for tag, attrs in tags if tag == "script")  # no inline script
    assert all(url.startswith(SWAGGER_UI) for url in re.findall(r'"(https://[^"]+)"', res.text))


def test_serve_docs_flag_serves_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn
    from click.testing import CliRunner

    from orchestrator.server.cli import serve

    apps: list[Any] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: apps.append(self.config.app))
    root = Path(__file__).resolve().parents[2]
    for flags in ([], ["--docs"]):
        args = ["--path", str(root / "agents"), "--config", str(root / "configs/default.yaml"), "--db", ":memory:"]
        result = CliRunner().invoke(serve, [*args, *flags])
        assert result.exit_code == 0, result.output
    served = [TestClient(app, base_url="http://127.0.0.1").get("/docs").status_code for app in apps]  # no lifespan
    assert served == [404, 200]
