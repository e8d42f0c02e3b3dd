"""Headless Chromium for the page's end-to-end tests: Debian's package, driven by Playwright through
`executable_path`, so no browser is downloaded. A test module marks itself `needs_chromium` and opens its
page with `chromium_page()`; it is skipped only when Debian's chromium is not installed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
# As the machine's probe starts it: without the background-networking flags the closed network refuses
# Chromium's own connections, many at a time.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)"
)


@contextmanager
def chromium_page(**options: Any) -> Iterator[Any]:
    """A new page in a browser of its own, closed on the way out; `options` go to `Browser.new_page`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(**options)
            page.set_default_timeout(20_000)
            yield page
        finally:
            browser.close()
