"""The web console in a real browser: Debian's headless chromium driven by Playwright.

`open_console(start_daemon)` starts a real `docex serve` and a browser whose every
request to another origin is aborted and recorded (`Console.outside`); page errors and
console errors are recorded too. Tests drive the page the way a person does, by
accessible names (`get_by_label("Email")`, `get_by_role("button", name="Sign in")`), and
save a screenshot of each screen with `Console.shot(name)` into SCREENSHOT_DIR
(`$DOCEX_SCREENSHOTS`, else `.cache/screenshots` in the checkout) for people to look at.

Playwright's sync API is used (its async API needs asyncio; these tests are plain
functions, outside trio).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from e2e_helpers import QUICK_ENV, wait_until_serving
from system_requirements import require_program, unavailable

try:  # the test extra installs it: only a partial install lacks it (a failure in CI, as for chromium)
    from playwright import sync_api
    from playwright.sync_api import expect
except ImportError:
    sync_api = None
    expect = None

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO.parent / "shared" / "samples"
SCREENSHOT_DIR = Path(os.environ.get("DOCEX_SCREENSHOTS") or REPO / ".cache" / "screenshots")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
    # A second wall behind the route: no name resolves except the docex server's address.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
# Extraction of a scan takes seconds on a busy 2-core machine; a page reacts much faster.
EXTRACTION_TIMEOUT_MS = 90_000
UI_TIMEOUT_MS = 15_000
PASSWORD = "correct horse battery"


@dataclass
class Console:
    """A daemon, a browser and one signed-out page on the console."""

    daemon: Any
    browser: Any
    context: Any
    page: Any
    outside: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def url(self, hash_: str = "") -> str:
        return self.daemon.url("/") + hash_

    def goto(self, hash_: str = "") -> None:
        self.page.goto(self.url(hash_))

    def shot(self, name: str, page: Any = None) -> Path:
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOT_DIR / f"{name}.png"
        (page or self.page).screenshot(path=path, full_page=True)
        return path

    def new_context(self) -> tuple[Any, Any]:
        """Another browser profile (its own cookies): another person at another desk."""
        context = self.browser.new_context(viewport={"width": 1360, "height": 900})
        context.set_default_timeout(UI_TIMEOUT_MS)
        context.route("**/*", self._only_docex)
        page = context.new_page()
        self._watch(page)
        return context, page

    def register(self, name: str, email: str, page: Any = None) -> None:
        """Create an account through the register screen and land on the jobs screen."""
        page = page or self.page
        page.goto(self.url("#/register"))
        page.get_by_label("Name").fill(name)
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Register").click()
        page.get_by_role("heading", name="Jobs").wait_for()

    def sign_in(self, email: str, page: Any = None) -> None:
        page = page or self.page
        page.goto(self.url("#/signin"))
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name="Jobs").wait_for()

    def api_token(self, email: str) -> str:
        """An access token for calling the API beside the page, as an integration would."""
        response = httpx.post(self.daemon.url("/api/auth/login"), json={"email": email, "password": PASSWORD})
        response.raise_for_status()
        token: str = response.json()["accessToken"]
        return token

    def _only_docex(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(self.daemon.url("/")) or url.startswith("blob:") or url.startswith("data:"):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def _watch(self, page: Any) -> None:
        page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        page.on("console", lambda message: self.errors.append(f"console {message.type}: {message.text}")
                if message.type == "error" and not _expected_console_error(message.text) else None)


def _expected_console_error(text: str) -> bool:
    # Chromium logs every 4xx answer a page's fetch receives ("Failed to load resource"): the
    # console meets some on purpose (a wrong password, a refused registration).
    return text.startswith("Failed to load resource")


@contextlib.contextmanager
def open_console(start_daemon: Callable[..., Any], env: dict[str, str] | None = None) -> Iterator[Console]:
    """A daemon with the console and a browser on it; at the end no request may have left
    docex's origin and no script error may have happened."""
    if sync_api is None:
        unavailable("needs the pip package `playwright`: pip install -e '.[test]'")
    chromium = require_program("chromium", debian_package="chromium")
    daemon = start_daemon(env={**QUICK_ENV, **(env or {})})
    wait_until_serving(daemon)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            console = Console(daemon, browser, None, None)
            console.context, console.page = console.new_context()
            yield console
        except BaseException as failure:
            failure.add_note(daemon.describe())  # the daemon's side of what went wrong
            raise
        finally:
            browser.close()
    assert console.outside == [], f"the console reached outside docex: {console.outside}"
    assert console.errors == [], f"script errors in the console: {console.errors}"


def wait_for_job_status(token: str, daemon: Any, job_id: str, statuses: set[str],
                        timeout_s: float = EXTRACTION_TIMEOUT_MS / 1000) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = httpx.get(daemon.url(f"/api/jobs/{job_id}"),
                                        headers={"Authorization": f"Bearer {token}"}).json()
        if job["status"] in statuses or time.monotonic() > deadline:
            return job
        time.sleep(0.5)


# --- documents with known values --------------------------------------------------------

RECEIPT_SCHEMA = {
    "type": "object",
    "properties": {
        "company": {"type": "string", "description": "Name of the shop or company that issued the receipt"},
        "date": {"type": "string", "format": "date", "description": "Date of the purchase"},
        "total": {"type": "number", "description": "Total amount paid"},
    },
    "required": ["company", "date", "total"],
}


def write_receipt_pdf(path: Path, *, company: str = "NORTHWIND TRADING LTD", date: str = "12/03/2024",
                      total: str = "48.20") -> Path:
    """A one-page receipt with a text layer: the issuer on top, a date line, items, a total."""
    from reportlab.lib.pagesizes import A5
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A5)
    _, height = A5
    c.setFont("Helvetica-Bold", 16)
    c.drawString(40, height - 60, company)
    c.setFont("Helvetica", 12)
    c.drawString(40, height - 84, "12 Harbour Road, Portsmouth PO1 3AX")
    c.drawString(40, height - 120, f"Date: {date}")
    lines = [("Coffee beans 1kg", "30.00"), ("Filter papers", "18.20")]
    y = height - 160
    for item, amount in lines:
        c.drawString(40, y, item)
        c.drawRightString(360, y, amount)
        y -= 20
    c.setFont("Helvetica-Bold", 13)
    c.drawString(40, y - 20, "TOTAL")
    c.drawRightString(360, y - 20, total)
    c.showPage()
    c.save()
    return path


def write_scan(pdf: Path, path: Path, dpi: int = 150) -> Path:
    """The PDF's first page as a PNG without a text layer: a scan for OCR."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(pdf))
    try:
        page = document[0]
        page.render(scale=dpi / 72).to_pil().convert("RGB").save(path, format="PNG")
        page.close()
    finally:
        document.close()
    return path
