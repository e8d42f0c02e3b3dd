"""Attack (held): model output and a person's text are rendered by the watch page in Chromium.

Model output is hostile: the scripted model answers with markup in its text,
in tool arguments (shown as progress) and the tool result comes back through
the page too. None of it may run: the page writes text with `textContent`,
and the page's Content-Security-Policy forbids inline script besides. The
page itself must still work under that policy (no CSP violations logged).
Skipped only when Debian's chromium is not installed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import chromium_page, needs_chromium

from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.guard import LOOPBACK_HOSTS
from orchestrator.server.scripted import scripted_model
from orchestrator.server.testing import LiveServer

ROOT = Path(__file__).resolve().parents[2]
PAYLOADS = [
    '<img src=x onerror="window.__xss=1">',
    "<script>window.__xss=2</script>",
    '"><svg onload="window.__xss=3">',
    '<iframe srcdoc="<script>parent.__xss=4</script>"></iframe>',
]
pytestmark = needs_chromium


def _script(tmp_path: Path) -> Path:
    hostile = " ".join(PAYLOADS)
    script = {
        "sides": [
            {
                "match": "customer support agent",
                "responses": [
                    {"text": f"Hello {hostile}"},
                    {
                        "text": PAYLOADS[0],
                        "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": PAYLOADS[1]}}],
                    },
                    {"text": f"Done {PAYLOADS[2]}"},
                ],
            },
            {
                "match": "customer of an online shop",
                "responses": [
                    {"text": f"Hi {PAYLOADS[3]}"},
                    {"text": "Bye", "tool_calls": [{"name": "end_chat", "arguments": {"reason": hostile}}]},
                ],
            },
        ],
        "default": {"text": hostile},
    }
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    return path


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    runtime = Runtime.from_path(
        ROOT / "agents", config=ROOT / "configs/default.yaml", storage=f"sqlite:///{tmp_path / 'xss.db'}"
    )
    app = create_app(runtime, tokens={"xss-token": "xss-user"}, own_runtime=True, allowed_hosts=LOOPBACK_HOSTS)
    with scripted_model(_script(tmp_path)).serving(), LiveServer(app) as live:
        yield live


def test_hostile_model_output_is_shown_as_text_and_never_runs(server: LiveServer) -> None:
    from playwright.sync_api import expect

    console: list[str] = []
    with chromium_page() as page:
        page.on("console", lambda message: console.append(message.text))
        page.on("dialog", lambda dialog: console.append(f"dialog: {dialog.message}"))
        page.goto(server.url + "/")
        page.fill("#token", "xss-token")
        page.dispatch_event("#token", "change")
        page.wait_for_selector("#agent option[value=support_demo]", state="attached")
        page.select_option("#agent", "support_demo")
        page.click("#new-thread")
        expect(page.locator("#connection")).to_have_text("live")
        page.click("#run")
        expect(page.locator("#status")).to_contain_text("stopped")
        expect(page.locator(".msg.side-a").first).to_contain_text(PAYLOADS[0])  # shown, as text
        expect(page.locator(".tool-call[data-name=lookup_order] .progress")).to_contain_text(PAYLOADS[1])
        page.reload()  # replayed from the event log: the same again
        expect(page.locator("#status")).to_contain_text("stopped")
        expect(page.locator(".msg.side-a").first).to_contain_text(PAYLOADS[0])
        assert page.evaluate("window.__xss") is None
        injected = page.evaluate(
            "document.querySelectorAll('#messages img, #messages svg, #messages iframe, #messages script').length"
        )
        assert injected == 0
        inline = page.evaluate(
            """() => { try { const s = document.createElement('script');
            s.textContent = 'window.__inline = 1'; document.body.appendChild(s); } catch (e) {}
            return window.__inline ?? null; }"""
        )
        assert inline is None  # the policy refuses inline script even if some day markup got through
    assert not [line for line in console if "dialog" in line]
    violations = [line for line in console if "Content Security Policy" in line]
    assert len(violations) == 1 and "inline script" in violations[0], violations  # the probe's, never the page's own
