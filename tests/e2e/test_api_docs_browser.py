"""`/api/docs` renders in a real browser with the network blocked (a server without internet).

Debian's headless chromium, driven by Playwright's sync API (its async API needs
asyncio, and these tests run under trio, so the test function is a plain one),
loads the page from a real `docex serve`. Every request to another host is
aborted and recorded: there must be none, and the page must list every operation
of the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from e2e_helpers import QUICK_ENV, wait_until_serving
from system_requirements import require_program, unavailable

try:  # the test extra installs it: only a partial install lacks it (a failure in CI, as for chromium)
    from playwright import sync_api
except ImportError:
    sync_api = None
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
    # A second wall behind the route below: no name resolves except the docex server's address,
    # so a request that escaped the route would fail (and the page would not render) rather than go out.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
RENDER_TIMEOUT_MS = 30_000  # a 1.7 MB bundle parsed on a busy 2-core machine


def test_api_docs_render_every_operation_without_network(start_daemon: Callable[..., Any],
                                                         tmp_path: Path) -> None:
    if sync_api is None:
        unavailable("needs the pip package `playwright`: pip install -e '.[test]'")
    chromium = require_program("chromium", debian_package="chromium")
    daemon = start_daemon(env=QUICK_ENV)
    wait_until_serving(daemon)
    origin = daemon.url("")
    document = httpx.get(daemon.url("/api/openapi.json")).json()
    # Every operation, and every event a receiver gets (the `webhooks` section, listed by type).
    operations = {
        (method.upper(), path)
        for section in ("paths", "webhooks")
        for path, item in document[section].items()
        for method in item
    }
    outside: list[str] = []
    served: list[str] = []
    page_errors: list[str] = []

    def only_docex(route: Any) -> None:
        url = route.request.url
        if url.startswith(origin + "/"):
            served.append(url.removeprefix(origin))
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", only_docex)
            page = context.new_page()
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            # The page's policy must let Swagger UI run, and refuse nothing it needs.
            page.on("console", lambda message: page_errors.append(message.text)
                    if "Content Security Policy" in message.text else None)
            response = page.goto(daemon.url("/api/docs"), wait_until="networkidle", timeout=RENDER_TIMEOUT_MS)
            assert response is not None
            policy = response.headers.get("content-security-policy", "")
            assert "script-src 'self' 'sha256-" in policy and "frame-ancestors 'none'" in policy, policy
            assert outside == [], f"the page tried to reach other hosts: {outside}"
            page.locator('.opblock-summary-path[data-path="/api/jobs"]').first.wait_for(timeout=RENDER_TIMEOUT_MS)
            listed = {
                (block.locator(".opblock-summary-method").inner_text().strip().upper(),
                 block.locator(".opblock-summary-path").get_attribute("data-path"))
                for block in page.locator(".opblock").all()
            }
            title = page.locator(".info .title").inner_text()
            page.screenshot(path=tmp_path / "api-docs.png", full_page=True)
        finally:
            browser.close()

    assert outside == [], f"the page tried to reach other hosts: {outside}"
    assert page_errors == []
    assert listed == operations
    assert ("POST", "/api/jobs") in listed and ("GET", "/api/jobs") in listed
    assert title.startswith("docex")
    # The viewer itself came from docex, under its versioned path.
    assert any(url.startswith("/api/docs/swagger-ui/") and url.endswith("/swagger-ui-bundle.js") for url in served)
