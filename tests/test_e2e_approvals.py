"""End to end in Chromium: the page lists a thread's calls waiting for the outside with their arguments, and
decides them through the HTTP routes: Approve / Reject (with a reason) an approval, submit a deferred call's
result (or an error), answer a tool's question (`state.ask`).

ai_human agents on the offline `test` model (it calls every tool once), each with one tool that waits.
Skipped only when Debian's chromium is not installed, as tests/test_e2e_browser.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import chromium_page, needs_chromium
from pydantic import BaseModel

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.testing import LiveServer
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict

pytestmark = needs_chromium


class _Refund(BaseModel):
    order_id: str
    amount: float


async def _refund(state: Any, args: _Refund) -> ToolResult:
    return ToolResult.ok(f"refunded {args.amount} on {args.order_id}")


async def _ship(state: Any, args: _Refund) -> ToolResult:
    return ToolResult.deferred()  # the warehouse answers later, through the page


async def _confirm(state: Any, args: _Refund) -> ToolResult:
    answer = await state.ask(f"Refund {args.amount} on {args.order_id}?")
    return ToolResult.ok(f"the customer said {answer!r}")


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[LiveServer]:
    from support import definitions

    defs = definitions(
        tools={
            "refund": define_tool(description="Refund", args=_Refund, execute=_refund, needs_approval=True),
            "ship": define_tool(description="Ship", args=_Refund, execute=_ship, deferred=True),
            "confirm": define_tool(description="Confirm", args=_Refund, execute=_confirm),
        },
        prompts={
            name: define_prompt(prompt="You help.", tools=(tool,), tool_description=name)
            for name, tool in (("clerk", "refund"), ("shipper", "ship"), ("checker", "confirm"))
        },
        agents={
            "refunds": define_agent(type="ai_human", side_a=Side("clerk")),
            "shipping": define_agent(type="ai_human", side_a=Side("shipper")),
            "confirming": define_agent(type="ai_human", side_a=Side("checker")),
        },
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
    with chromium_page(viewport={"width": 1280, "height": 900}) as page:
        yield page


def _ask_for_a_refund(page: Any, desk: LiveServer, agent: str = "refunds", tool: str = "refund") -> None:
    from playwright.sync_api import expect

    page.goto(desk.url + "/")
    page.fill("#token", "e2e-token")
    page.dispatch_event("#token", "change")
    page.wait_for_selector(f"#agent option[value={agent}]", state="attached")
    page.select_option("#agent", agent)
    page.click("#new-thread")
    expect(page.locator("#connection")).to_have_text("live")
    page.fill("#message-input", "Refund my order please")
    page.press("#message-input", "Enter")
    expect(page.locator("#waiting-section")).to_be_visible()
    expect(page.locator(".waiting-call .name")).to_have_text(tool)
    expect(page.locator(".waiting-call .arguments")).to_contain_text('"amount"')


def test_approve_on_the_page_runs_the_call(desk: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    _ask_for_a_refund(page, desk)
    expect(page.locator("#status")).to_contain_text("awaiting_approval")
    page.click(".waiting-call .approve")
    expect(page.locator(".tool-call[data-name=refund] .result")).to_contain_text("refunded ")
    expect(page.locator("#waiting-section")).to_be_hidden()
    expect(page.locator("#status")).to_contain_text("stopped: rest")


def test_reject_on_the_page_gives_the_model_the_reason(desk: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    _ask_for_a_refund(page, desk)
    expect(page.locator("#status")).to_contain_text("awaiting_approval")
    page.fill(".waiting-call .reason", "needs a receipt first")
    page.click(".waiting-call .reject")
    result = page.locator(".tool-call[data-name=refund] .result")
    expect(result).to_contain_text("rejected and did not run")
    expect(result).to_contain_text("needs a receipt first")
    expect(page.locator("#waiting-section")).to_be_hidden()


def test_a_deferred_call_gets_its_result_on_the_page(desk: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    _ask_for_a_refund(page, desk, agent="shipping", tool="ship")
    expect(page.locator("#status")).to_contain_text("awaiting_result")
    expect(page.locator(".waiting-call .approve")).to_have_count(0)  # not an approval: no approve button
    page.fill(".waiting-call .result-text", "parcel 7731 left the warehouse")
    page.click(".waiting-call .submit-result")
    expect(page.locator(".tool-call[data-name=ship] .result")).to_contain_text("parcel 7731 left the warehouse")
    expect(page.locator("#waiting-section")).to_be_hidden()


def test_a_deferred_call_can_be_failed_on_the_page(desk: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    _ask_for_a_refund(page, desk, agent="shipping", tool="ship")
    page.fill(".waiting-call .result-text", "the warehouse is closed")
    page.click(".waiting-call .submit-error")
    result = page.locator(".tool-call[data-name=ship]")
    expect(result).to_contain_text("the warehouse is closed")
    expect(result.locator(".state")).not_to_have_text("✓ done")
    expect(page.locator("#waiting-section")).to_be_hidden()


def test_a_tools_question_is_answered_on_the_page(desk: LiveServer, page: Any) -> None:
    from playwright.sync_api import expect

    _ask_for_a_refund(page, desk, agent="confirming", tool="confirm")
    expect(page.locator("#status")).to_contain_text("awaiting_answer")
    expect(page.locator(".waiting-call .question")).to_contain_text("Refund")
    page.fill(".waiting-call .answer-text", "yes, go ahead")
    page.click(".waiting-call .send-answer")
    expect(page.locator(".tool-call[data-name=confirm] .result")).to_contain_text("the customer said 'yes, go ahead'")
    expect(page.locator("#waiting-section")).to_be_hidden()
