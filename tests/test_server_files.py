"""GET /threads/{id}/files and /threads/{id}/files/{file_id}: per user, safe to open.

The tool below returns files whose names and types a model could choose: an
image, an HTML page, and a name built to break a header. The runtime runs on
the offline `test` model, which calls the tool by itself.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from support import definitions

from orchestrator import Side, ToolAttachment, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict

ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
HTML = b"<script>alert(document.cookie)</script>"
EVIL_NAME = 'evil"\r\nSet-Cookie: x=1;.txt'


class _NoArgs(BaseModel):
    pass


async def _draw(state: Any, args: _NoArgs) -> ToolResult:
    files = [("chart.png", "image/png", PNG), ("report.html", "text/html", HTML), (EVIL_NAME, "text/plain", b"hi")]
    return ToolResult.ok(
        "drew it",
        attachments=[
            ToolAttachment(name=name, mime_type=mime, data=base64.b64encode(data).decode())
            for name, mime, data in files
        ],
    )


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    defs = definitions(
        tools={"draw": define_tool(description="Draw", args=_NoArgs, execute=_draw)},
        prompts={"artist": define_prompt(prompt="You draw.", tools=("draw",), tool_description="draw")},
        agents={"studio": define_agent(type="ai_human", side_a=Side("artist"))},
    )
    runtime = Runtime(
        defs,
        config=config_from_dict({}),
        storage=SQLiteStorage(str(tmp_path / "f.db")),
        settings=RuntimeSettings(model="test"),
    )
    async with runtime:
        thread = await runtime.create_thread("studio", user_id="alice")
        await thread.send("Draw me something")
        app = create_app(runtime, tokens={"token-alice": "alice", "token-bob": "bob"})
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            yield client, thread.id


async def test_the_list_names_every_file_with_type_size_and_url(served: tuple[httpx.AsyncClient, str]) -> None:
    client, thread_id = served
    res = await client.get(f"/threads/{thread_id}/files", headers=ALICE)
    assert res.status_code == 200, res.text
    files = res.json()["files"]
    assert [(f["name"], f["mime_type"], f["size"], f["inline"]) for f in files] == [
        ("chart.png", "image/png", len(PNG), True),
        ("report.html", "text/html", len(HTML), False),
        (EVIL_NAME, "text/plain", 2, False),
    ]
    assert all(f["url"] == f"/threads/{thread_id}/files/{f['id']}" for f in files)


async def test_an_image_is_served_inline_with_its_type(served: tuple[httpx.AsyncClient, str]) -> None:
    client, thread_id = served
    [image] = [
        f for f in (await client.get(f"/threads/{thread_id}/files", headers=ALICE)).json()["files"] if f["inline"]
    ]
    res = await client.get(image["url"], headers=ALICE)
    assert res.status_code == 200 and res.content == PNG
    assert res.headers["content-type"] == "image/png"
    assert res.headers["x-content-type-options"] == "nosniff"
    assert res.headers["content-disposition"] == "inline; filename*=UTF-8''chart.png"


async def test_html_is_a_download_that_no_browser_renders(served: tuple[httpx.AsyncClient, str]) -> None:
    client, thread_id = served
    files = (await client.get(f"/threads/{thread_id}/files", headers=ALICE)).json()["files"]
    html = next(f for f in files if f["name"] == "report.html")
    res = await client.get(html["url"], headers=ALICE)
    assert res.content == HTML
    assert res.headers["content-type"] == "application/octet-stream"
    assert res.headers["content-disposition"].startswith("attachment;")
    assert "sandbox" in res.headers["content-security-policy"] and res.headers["x-content-type-options"] == "nosniff"


async def test_a_hostile_name_cannot_add_a_header(served: tuple[httpx.AsyncClient, str]) -> None:
    client, thread_id = served
    files = (await client.get(f"/threads/{thread_id}/files", headers=ALICE)).json()["files"]
    evil = next(f for f in files if f["name"] == EVIL_NAME)
    res = await client.get(evil["url"], headers=ALICE)
    assert res.status_code == 200 and "set-cookie" not in res.headers
    assert (
        res.headers["content-disposition"] == "attachment; filename*=UTF-8''evil%22%0D%0ASet-Cookie%3A%20x%3D1%3B.txt"
    )


async def test_another_user_and_a_missing_file_get_404(served: tuple[httpx.AsyncClient, str]) -> None:
    client, thread_id = served
    files = (await client.get(f"/threads/{thread_id}/files", headers=ALICE)).json()["files"]
    assert (await client.get(f"/threads/{thread_id}/files", headers=BOB)).status_code == 404
    assert (await client.get(files[0]["url"], headers=BOB)).status_code == 404
    assert (await client.get(f"/threads/{thread_id}/files", headers={})).status_code == 401
    missing = await client.get(f"/threads/{thread_id}/files/file_nope", headers=ALICE)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "file_not_found"


def test_the_cli_prints_each_attachments_name_type_and_size() -> None:
    from rich.console import Console

    from orchestrator.cli.console import ConsoleView
    from orchestrator.core.messages import Event

    console = Console(record=True, width=200)
    view = ConsoleView({"a": "artist", "b": "person"}, console=console)
    refs = [
        {"id": "file_1", "name": "chart.png", "mime_type": "image/png", "size": 2048},
        {"id": "file_2", "name": "report.html", "mime_type": "text/html", "size": 40},
    ]
    view.show(
        Event(
            thread_id="t",
            seq=1,
            type="tool_result",
            data={"name": "draw", "tool_status": "success", "content": "drew it", "attachments": refs},
        )
    )
    out = console.export_text()
    assert "📎 chart.png (image/png, 2.0 KB) id file_1" in out and "📎 report.html (text/html, 40 B) id file_2" in out
