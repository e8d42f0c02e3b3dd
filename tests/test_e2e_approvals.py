"""End to end in Chromium: the page lists a thread's calls waiting for approval with their arguments, and
its Approve / Reject (with a reason) buttons decide them through the HTTP routes.

An ai_human agent on the offline `test` model (it calls every tool once), whose one tool needs approval.
Skipped only when Debian's chromium is not installed, as tests/test_e2e_browser.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.testing import LiveServer
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)"
)


class _Refund(BaseModel):
    order_id: str
    amount: float


async def _refund(state: Any, args: _Refund) -> ToolResult:
    return ToolResult.ok(f"refunded {args.amount} on {args.order_id}")


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[LiveServer]:
    from support import definitions

    defs = definitions(
        tools={
            "refund": define_tool(description="Refund", args=_Refund, execute=_refund, needs_approval=True),
        },
        prompts={"clerk": define_prompt(prompt="You refund.", tools=("refund",), tool_description="clerk")},
        agents={"refunds": define_agent(type="ai_human", side_a=Side("clerk"))},
    )
    runtime = Runtime(
        defs,
        config=config_from_dict({}),
        storage=SQLiteStorage(str(tmp_path / "desk.db")),
        settings=RuntimeSettings(model="test"),
    )
    app = create_app(runtime, tokens={"e2e-token": "e2e-user"}, own_runtime=True)
    with LiveServer(app) as live:
        yield live


@pytest.fixture
def page(desk: LiveServer) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(20_000)
            yield page
        finally:
            browser.close()


def _ask_for_a_refund(page: Any, desk: LiveServer) -> None:
    from playwright.sync_api import expect

    page.goto(desk.url + "/")
    page.fill("#token", "e2e-token")
    page.dispatch_event("#token", "change")
    page.wait_for_selector("#agent option[value=refunds]", state="attached")
    page.select_option("#agent", "refunds")
    page.click("#new-thread")
    expect(page.locator("#connection")).to_have_text("live")
    page.fill("#message-input", "Refund my order please")
    page.press("#message-input", "Enter")
    expect(page.locator("#waiting-section")).to_be_visible()
    expect(page.locator(".waiting-call .name")).to_have_text("refund")
    expect(page.locator(".waiting-call .arguments")).to_contain_text('"amount"')
    expect(page.locator("#status")).to_contain_text("awaiting_approval")


def test_approve_on_the_page_runs_the_call(desk: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    _ask_for_a_refund(page, desk)
    page.click(".waiting-call .approve")
    expect(page.locator(".tool-call[data-name=refund] .result")).to_contain_text("refunded ")
    expect(page.locator("#waiting-section")).to_be_hidden()
    expect(page.locator("#status")).to_contain_text("stopped: rest")


def test_reject_on_the_page_gives_the_model_the_reason(desk: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    _ask_for_a_refund(page, desk)
    page.fill(".waiting-call .reason", "needs a receipt first")
    page.click(".waiting-call .reject")
    result = page.locator(".tool-call[data-name=refund] .result")
    expect(result).to_contain_text("rejected and did not run")
    expect(result).to_contain_text("needs a receipt first")
    expect(page.locator("#waiting-section")).to_be_hidden()
