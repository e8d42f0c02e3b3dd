"""End to end: headless Chromium drives the watch page against a live server.

The server runs the shipped `agents/` on the built-in scripted demo model
(`serve --scripted demo`), so the `support_demo` conversation is the same
every time. Skipped only when Debian's chromium is not installed
(`apt-get install -y chromium`); Playwright drives it, never downloads one.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import chromium_page, needs_chromium
from pydantic import BaseModel

from orchestrator import Side, ToolAttachment, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.scripted import DEMO_SCRIPT, scripted_model
from orchestrator.server.testing import LiveServer
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
pytestmark = needs_chromium


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    runtime = Runtime.from_path(
        ROOT / "agents", config=ROOT / "configs/default.yaml", storage=f"sqlite:///{tmp_path / 'e2e.db'}"
    )
    app = create_app(runtime, tokens={"e2e-token": "e2e-user"}, own_runtime=True)
    with scripted_model(DEMO_SCRIPT).serving(), LiveServer(app) as live:
        yield live


@pytest.fixture
def page(server: LiveServer) -> Iterator[object]:
    with chromium_page(viewport={"width": 1280, "height": 900}) as page:
        yield page


def _sign_in(page: object, server: LiveServer) -> None:
    page.goto(server.url + "/")  # type: ignore[attr-defined]
    page.fill("#token", "e2e-token")  # type: ignore[attr-defined]
    page.dispatch_event("#token", "change")  # type: ignore[attr-defined]
    page.wait_for_selector("#agent option[value=support_demo]", state="attached")  # type: ignore[attr-defined]


def test_watch_and_drive_a_dual_ai_conversation(server: LiveServer, page: object) -> None:
    from playwright.sync_api import expect

    p = page  # type: ignore[assignment]
    _sign_in(p, server)
    p.select_option("#agent", "support_demo")
    p.click("#new-thread")
    expect(p.locator("#info-agent")).to_contain_text("support_demo (dual_ai)")
    expect(p.locator("#composer")).to_be_hidden()  # no person on a dual_ai thread
    expect(p.locator("#connection")).to_have_text("live")
    p.click("#run")

    expect(p.locator("#status")).to_contain_text("stopped: end_conversation (side b)")
    expect(p.locator(".msg.side-a").first).to_contain_text("How can I help you today?")
    expect(p.locator(".msg.side-b").first).to_contain_text("My order A1002 has been processing")
    tool = p.locator(".tool-call[data-name=lookup_order]")
    expect(tool.locator(".progress")).to_have_text("order_id: A1002")
    expect(tool.locator(".state")).to_have_text("✓ done")
    expect(tool.locator(".result")).to_contain_text('"status": "processing"')
    expect(p.locator(".tool-call[data-name=end_chat] .state")).to_have_text("✓ done")
    expect(p.locator("#step-count")).to_have_text("5")
    expect(p.locator("#side-a-steps")).to_have_text("3")
    expect(p.locator("#side-b-steps")).to_have_text("2")
    expect(p.locator(".msg.streaming")).to_have_count(0)
    assert p.locator(".msg.side-a").count() == 3 and p.locator(".msg.side-b").count() == 2
    ARTIFACTS.mkdir(exist_ok=True)
    p.screenshot(path=str(ARTIFACTS / "e2e_support_demo.png"), full_page=True)

    p.reload()  # a fresh page replays the whole thread from the event log
    expect(p.locator("#status")).to_contain_text("stopped: end_conversation")
    expect(p.locator(".tool-call[data-name=lookup_order] .progress")).to_have_text("order_id: A1002")
    assert p.locator(".msg.side-b").count() == 2


def test_person_types_into_an_ai_human_thread(server: LiveServer, page: object) -> None:
    from playwright.sync_api import expect

    p = page  # type: ignore[assignment]
    _sign_in(p, server)
    p.select_option("#agent", "support_chat")
    p.click("#new-thread")
    expect(p.locator("#composer")).to_be_visible()
    expect(p.locator("#run")).to_be_disabled()
    expect(p.locator("#connection")).to_have_text("live")
    p.fill("#message-input", "Hello, where is my order?")
    p.press("#message-input", "Enter")
    expect(p.locator(".msg.side-b").first).to_contain_text("Hello, where is my order?")
    expect(p.locator(".msg.side-a").first).to_contain_text("How can I help you today?")
    expect(p.locator("#status")).to_contain_text("stopped: rest")
    ARTIFACTS.mkdir(exist_ok=True)
    p.screenshot(path=str(ARTIFACTS / "e2e_support_chat.png"), full_page=True)


_ORDER_JS = """() => [...document.querySelectorAll('#messages > *')].map((n) =>
  n.classList.contains('tool-call') ? 'tool:' + n.dataset.name
    : (n.className.split(' ')[1] || '') + ':' + n.querySelector('.text').textContent)"""


def test_the_order_after_a_reload_is_the_live_order(server: LiveServer, page: object) -> None:
    from playwright.sync_api import expect

    p = page  # type: ignore[assignment]
    _sign_in(p, server)
    p.select_option("#agent", "support_demo")
    p.click("#new-thread")
    expect(p.locator("#connection")).to_have_text("live")
    p.click("#run")
    expect(p.locator("#status")).to_contain_text("stopped: end_conversation")
    expect(p.locator(".msg.streaming")).to_have_count(0)
    live = p.evaluate(_ORDER_JS)
    # the demo answers with text and a tool call in one response: the text streams first
    assert live.index("side-a:Let me look that order up for you.") < live.index("tool:lookup_order")
    expect(p.locator("#usage")).to_contain_text("(thread total)")
    p.reload()
    expect(p.locator("#status")).to_contain_text("stopped: end_conversation")
    expect(p.locator(".tool-call[data-name=end_chat] .state")).to_have_text("✓ done")
    assert p.evaluate(_ORDER_JS) == live
    first = p.locator("#event-log li details").first
    expect(first.locator("summary")).to_contain_text("thread_created")
    first.locator("summary").click()
    expect(first.locator("pre")).to_contain_text('"agent": "support_demo"')


class _NoArgs(BaseModel):
    pass


class _City(BaseModel):
    city: str = "Oslo"


async def _forecast(state: Any, args: _City) -> ToolResult:
    return ToolResult.ok(f"sunny in {args.city}")


async def _draw(state: Any, args: _NoArgs) -> ToolResult:
    weather = await state.invoke_tool("forecast", {"city": "Bergen"})
    files = [("chart.png", "image/png", _PNG), ("notes.txt", "text/plain", b"remember the umbrella")]
    attachments = [ToolAttachment(name=n, mime_type=m, data=base64.b64encode(d).decode()) for n, m, d in files]
    return ToolResult.ok(f"drew it ({weather.result})", attachments=attachments)


_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture
def studio(tmp_path: Path) -> Iterator[LiveServer]:
    """An ai_human agent on the offline `test` model, whose one tool invokes another and returns files."""
    from support import definitions

    defs = definitions(
        tools={
            "draw": define_tool(description="Draw", args=_NoArgs, execute=_draw, uses=("forecast",)),
            "forecast": define_tool(description="Forecast", args=_City, execute=_forecast),
        },
        prompts={"artist": define_prompt(prompt="You draw.", tools=("draw",), tool_description="draw")},
        agents={"studio": define_agent(type="ai_human", side_a=Side("artist"))},
    )
    runtime = Runtime(
        defs,
        config=config_from_dict({}),
        storage=SQLiteStorage(str(tmp_path / "studio.db")),
        settings=RuntimeSettings(model="test"),
    )
    app = create_app(runtime, tokens={"e2e-token": "e2e-user"}, own_runtime=True)
    with LiveServer(app) as live:
        yield live


_IMAGE_SHOWN = """() => { const img = document.querySelector('.tool-call[data-name=draw] .files img');
  return img !== null && img.complete && img.naturalWidth > 0; }"""


def test_invoked_calls_nest_and_attachments_show(studio: LiveServer, page: object) -> None:
    """The image is displayed, not only given a blob: src: the page's CSP once blocked its own blob: URLs
    (naturalWidth 0, the broken-image text)."""
    from playwright.sync_api import expect

    p = page  # type: ignore[assignment]
    violations: list[str] = []
    p.on("console", lambda m: "Content Security Policy" in m.text and violations.append(m.text))
    p.goto(studio.url + "/")
    p.fill("#token", "e2e-token")
    p.dispatch_event("#token", "change")
    p.wait_for_selector("#agent option[value=studio]", state="attached")
    p.select_option("#agent", "studio")
    p.click("#new-thread")
    expect(p.locator("#connection")).to_have_text("live")
    p.fill("#message-input", "Draw me the weather")
    p.press("#message-input", "Enter")
    draw = p.locator(".tool-call[data-name=draw]")
    for attempt in ("live", "after a reload"):
        nested = draw.locator(".nested-calls .tool-call[data-name=forecast]")
        expect(nested.locator(".state")).to_have_text("✓ done")
        expect(nested.locator(".result")).to_have_text("sunny in Bergen")
        expect(draw.locator(".files img")).to_have_attribute("src", re.compile(r"^blob:"))
        p.wait_for_function(_IMAGE_SHOWN, timeout=10_000)
        assert p.evaluate("() => document.querySelector('.files img').naturalWidth") == 1  # the 1x1 PNG
        expect(draw.locator(".files a.file")).to_have_text("notes.txt (text/plain, 21 bytes)")
        expect(p.locator("#usage")).to_contain_text("2 requests")
        if attempt == "live":
            p.reload()
    assert violations == []


def test_the_page_lists_your_threads_newest_first_and_opens_one(server: LiveServer, page: object) -> None:
    """Nobody pastes thread ids: the page lists the token's threads, newest first, with agent and status; a
    click opens one (and a reload keeps the list). The page has its icon, and asks for no /favicon.ico."""
    from playwright.sync_api import expect

    p = page  # type: ignore[assignment]
    missing: list[str] = []
    p.on("response", lambda r: r.status == 404 and missing.append(r.url))
    _sign_in(p, server)
    expect(p.locator("#no-threads")).to_be_visible()
    p.select_option("#agent", "support_demo")
    p.click("#new-thread")
    expect(p.locator("#connection")).to_have_text("live")
    demo_id = p.locator("#info-id").text_content()
    p.click("#run")
    expect(p.locator("#status")).to_contain_text("stopped: end_conversation")
    p.select_option("#agent", "support_chat")
    p.click("#new-thread")
    expect(p.locator("#info-agent")).to_contain_text("support_chat")
    chat_id = p.locator("#info-id").text_content()

    rows = p.locator("#threads .thread")
    expect(rows).to_have_count(2)
    expect(p.locator("#no-threads")).to_be_hidden()
    expect(rows.nth(0)).to_have_attribute("data-id", chat_id)
    expect(rows.nth(0).locator(".agent")).to_have_text("support_chat")
    expect(rows.nth(0).locator(".status")).to_have_text("idle")
    expect(rows.nth(0)).to_have_attribute("aria-current", "true")
    expect(rows.nth(1)).to_have_attribute("data-id", demo_id)
    expect(rows.nth(1).locator(".status")).to_have_text("completed")

    rows.nth(1).click()
    expect(p.locator("#info-id")).to_have_text(demo_id)
    expect(p.locator("#info-agent")).to_contain_text("support_demo (dual_ai)")
    expect(p.locator(".msg.side-b").first).to_contain_text("My order A1002 has been processing")
    expect(rows.nth(1)).to_have_attribute("aria-current", "true")
    p.reload()
    expect(p.locator("#threads .thread")).to_have_count(2)

    icon = p.get_attribute("link[rel=icon]", "href")
    answer = p.request.get(server.url + icon)
    assert answer.status == 200 and answer.headers["content-type"].startswith("image/svg+xml")
    assert missing == []


def test_fork_from_here_opens_the_fork_and_the_tree_shows_both(server: LiveServer, page: object) -> None:
    from playwright.sync_api import expect

    p = page  # type: ignore[assignment]
    _sign_in(p, server)
    p.select_option("#agent", "support_demo")
    p.click("#new-thread")
    expect(p.locator("#connection")).to_have_text("live")
    original = p.locator("#info-id").text_content()
    p.click("#run")
    expect(p.locator("#status")).to_contain_text("stopped: end_conversation (side b)")
    first = p.locator(".msg.side-a").first
    seq = first.get_attribute("data-seq")
    first.locator("button.fork").click()  # side a's first answer: a valid point

    expect(p.locator("#info-id")).not_to_have_text(original or "")
    fork_id = p.locator("#info-id").text_content()
    expect(p.locator(".msg.side-a")).to_have_count(1)  # the fork's history ends at that message
    expect(p.locator(".msg.side-b")).to_have_count(0)
    expect(p.locator("#fork-tree-section")).to_be_visible()
    tree = p.locator("#fork-tree button.thread")
    expect(tree).to_have_count(2)
    expect(p.locator(f"#fork-tree button[data-id='{fork_id}']")).to_have_attribute("aria-current", "true")
    expect(p.locator(f"#fork-tree button[data-id='{fork_id}']")).to_contain_text(f"at {seq}")
    p.locator(f"#fork-tree button[data-id='{original}']").click()  # back to the original: untouched
    expect(p.locator("#info-id")).to_have_text(original or "")
    expect(p.locator(".msg.side-b")).to_have_count(2)
